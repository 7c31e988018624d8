package xds

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// TestUnwrittenBudgetTurns: responses go in the order they came while
// their bytes fit; one larger than the budget goes alone; a wait given up
// (its stream ended) lets the next go; bytes not written out within the
// wait stop counting; bytes of a buffer gRPC dropped come back when its
// stream ends, and bytes given back once are not given back again.
func TestUnwrittenBudgetTurns(t *testing.T) {
	m := newGuardMetrics()
	b := newUnwrittenBudget(100, time.Hour, m)
	ctx := context.Background()
	used := func() int64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.used
	}
	type took struct {
		c   *unwrittenCharge
		err error
	}
	// take in a goroutine; the result once granted.
	async := func(ctx context.Context, n int) chan took {
		ch := make(chan took, 1)
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		go func() {
			c, err := b.take(ctx, n)
			ch <- took{c, err}
		}()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			b.mu.Lock()
			q := len(b.queue)
			b.mu.Unlock()
			if q > queued || len(ch) > 0 || time.Now().After(deadline) {
				return ch
			}
		}
	}
	pending := func(ch chan took) bool {
		select {
		case r := <-ch:
			ch <- r
			return false
		case <-time.After(20 * time.Millisecond):
			return true
		}
	}
	a, err := b.take(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	big := async(ctx, 60)
	small := async(ctx, 10) // fits, but behind big
	if !pending(big) || !pending(small) {
		t.Fatal("a response went past the budget, or past one waiting before it")
	}
	a.give()
	a.give() // once only
	r1, r2 := <-big, <-small
	if got := used(); got != 70 {
		t.Fatalf("in use %d, want 70", got)
	}
	// Larger than the budget: waits for none in use, then goes alone.
	huge := async(ctx, 500)
	cctx, cancel := context.WithCancel(ctx)
	gone := async(cctx, 5)
	after := async(ctx, 5)
	if !pending(huge) || !pending(gone) || !pending(after) {
		t.Fatal("a response went past a larger one waiting")
	}
	r1.c.give()
	r2.c.give()
	r3 := <-huge
	if got := used(); got != 500 {
		t.Fatalf("in use %d, want 500", got)
	}
	cancel()
	if r := <-gone; r.err == nil {
		t.Fatal("a wait whose stream ended took the bytes")
	}
	r3.c.give()
	r4 := <-after
	r4.c.give()
	if got := used(); got != 0 {
		t.Fatalf("in use %d after all were given back", got)
	}
	for outcome, want := range map[string]float64{"room": 4, "ended": 1} {
		if got := testutil.ToFloat64(m.responsesWaited.WithLabelValues(outcome)); got != want {
			t.Errorf("waits %s: %v, want %v", outcome, got, want)
		}
	}
	// A response not written out: its bytes stop counting after the
	// wait, and are not given back twice.
	b.wait = 30 * time.Millisecond
	hold, _ := b.take(ctx, 100)
	tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
	defer tcancel()
	next, err := b.take(tctx, 50)
	if err != nil {
		t.Fatalf("a response still waits after the bytes before it were held unwritten for the wait: %v", err)
	}
	if got := testutil.ToFloat64(m.responsesWaited.WithLabelValues("expired")); got != 1 {
		t.Errorf("went once bytes expired %v times, want 1", got)
	}
	hold.give()
	if got := used(); got != 50 {
		t.Fatalf("in use %d, want the 50 counted", got)
	}
	next.give()
	// Buffers of a stream, one put back and one dropped without being put
	// back; the stream then ends.
	b.wait = time.Hour
	before := used()
	var sc streamCharges
	put, _ := b.take(ctx, 20)
	dropped, _ := b.take(ctx, 30)
	for _, c := range []*unwrittenCharge{put, dropped} {
		if !sc.add(c) {
			t.Fatal("a charge of a stream not ended was refused")
		}
	}
	p := put.pool(bufferPool)
	p.Put(p.Get(2048))
	if got := used(); got != before+30 {
		t.Fatalf("in use %d after a buffer was put back, want %d", got, before+30)
	}
	_ = dropped.pool(bufferPool).Get(2048)
	sc.end()
	if got := used(); got != before {
		t.Fatalf("in use %d after the stream ended, want %d: a dropped buffer's bytes did not come back", got, before)
	}
	if sc.open.first != nil || sc.open.last != nil {
		t.Fatal("the ended stream still lists charges")
	}
	// A charge of the ended stream is refused (its sender gives it back),
	// and a late put of a buffer given back gives nothing back twice.
	late, _ := b.take(ctx, 10)
	if sc.add(late) {
		t.Fatal("a charge of an ended stream was taken")
	}
	late.ended()
	p.Put(p.Get(2048))
	if got := used(); got != before {
		t.Fatalf("in use %d, want %d: bytes given back twice", got, before)
	}
}

// countingPool is bufferPool, counting the bytes of its buffers not yet
// put back, and their peak.
type countingPool struct {
	held, peak atomic.Int64
}

func (p *countingPool) Get(n int) *[]byte {
	b := bufferPool.Get(n)
	h := p.held.Add(int64(cap(*b)))
	for pk := p.peak.Load(); h > pk && !p.peak.CompareAndSwap(pk, h); pk = p.peak.Load() {
	}
	return b
}

func (p *countingPool) Put(b *[]byte) {
	p.held.Add(-int64(cap(*b)))
	bufferPool.Put(b)
}

// TestUnwrittenResponsesBounded: clients that do not read have their
// first response encoded and held by gRPC (their flow-control window is
// full); under max_unwritten_response_bytes the other streams' responses
// wait unencoded, so what is held stays one response (larger than the
// budget) and not one per stream, delta and sotw alike. When those
// clients go, the bytes come back and a client that reads gets its whole
// state.
func TestUnwrittenResponsesBounded(t *testing.T) {
	const services = 2000
	c := clustersCache(t, services)
	for _, delta := range []bool{true, false} {
		t.Run(modeName(delta), func(t *testing.T) { unwrittenBounded(t, c, services, delta) })
	}
}

// clustersCache is a ready cache of services services, each a cluster and
// its assignment, its responses not split.
func clustersCache(t *testing.T, services int) *Cache {
	t.Helper()
	c := NewCache(WithMaxResponseBytes(0))
	all := make([]translate.Resources, services)
	for i := range all {
		s := sources.Service{Name: fmt.Sprintf("svc-%05d", i)}
		s.Endpoints = []sources.Endpoint{{Address: fmt.Sprintf("10.0.%d.%d", i>>8&255, i&255), Port: 80}}
		all[i], _ = translate.Service(s)
	}
	if err := c.PublishServices(all, nil); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	return c
}

func unwrittenBounded(t *testing.T, c *Cache, services int, delta bool) {
	const budget, stuck = 64 << 10, 8
	s := NewServer(c, Options{Limits: Limits{MaxUnwrittenResponseBytes: budget}})
	pool := &countingPool{}
	s.out = pool
	b := s.guard.unwritten
	b.wait = time.Minute // no response's bytes expire here
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-done })

	// open asks for every cluster; its recv returns a response's size and
	// how many resources it carried.
	open := func(ctx context.Context) (recv func() (int, int)) {
		t.Helper()
		// A fixed 64 KiB window (no BDP growth): a client that does not
		// read stops the server's writes after 64 KiB.
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		context.AfterFunc(ctx, func() { cc.Close() })
		ads := discovery.NewAggregatedDiscoveryServiceClient(cc)
		node := &core.Node{Id: "n"}
		if delta {
			st, err := ads.DeltaAggregatedResources(ctx)
			return adsStarted(t, st, err, &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, Node: node},
				func(r *discovery.DeltaDiscoveryResponse) int { return len(r.Resources) })
		}
		st, err := ads.StreamAggregatedResources(ctx)
		return adsStarted(t, st, err, &discovery.DiscoveryRequest{TypeUrl: ClusterType, Node: node},
			func(r *discovery.DiscoveryResponse) int { return len(r.Resources) })
	}
	inUse := func() int64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.used
	}
	waiting := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue)
	}
	// allGiven waits for every response's bytes to come back: a buffer
	// put back, or one gRPC dropped with its connection (never put
	// back, still held by the counting pool) when its stream ends.
	allGiven := func(when string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); inUse() > 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d bytes in the budget", when, inUse())
			}
		}
	}
	// readAll reads a whole state of clusters; the largest response's size.
	readAll := func(recv func() (int, int)) (largest int) {
		t.Helper()
		for got := 0; got < services; {
			size, n := recv()
			got += n
			largest = max(largest, size)
		}
		return largest
	}
	rctx, rstop := context.WithCancel(ctx)
	size := readAll(open(rctx))
	if size <= budget {
		t.Fatalf("a response of %d bytes, not above the budget", size)
	}
	rstop()
	allGiven("after a client that read")
	if h := pool.held.Load(); h != 0 {
		t.Fatalf("%d bytes held after a client read its state", h)
	}
	pool.peak.Store(0)

	sctx, stop := context.WithCancel(ctx)
	for range stuck {
		open(sctx)
	}
	// The first response went, the others wait for it to be written out
	// (or, without the budget, all are encoded and held).
	for deadline := time.Now().Add(10 * time.Second); waiting() < stuck-1 && pool.held.Load() < stuck*int64(size); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	if p := pool.peak.Load(); p >= 2*int64(size) {
		t.Fatalf("%d bytes of encoded responses held at the peak, for one response of %d (%d clients not reading)", p, size, stuck)
	}
	if q := waiting(); q != stuck-1 {
		t.Fatalf("%d responses wait, want %d", q, stuck-1)
	}
	if got := testutil.ToFloat64(s.m.guard.unwrittenBytes); got != float64(size) {
		t.Errorf("xdsbridge_xds_unwritten_response_bytes %v, want the first response's %d", got, size)
	}
	stop()
	allGiven("after the clients that did not read went")
	// As the clients went, a wait could still be given its turn first.
	waited := s.m.guard.responsesWaited
	if got := testutil.ToFloat64(waited.WithLabelValues("ended")) + testutil.ToFloat64(waited.WithLabelValues("room")); got != stuck-1 {
		t.Errorf("%v waits counted, want %d", got, stuck-1)
	}
	// Nothing kept: a client that reads gets its state.
	readAll(open(ctx))
}

// adsStarted sends req on st (opened with err), and returns what reads
// its responses: each one's size and count of resources.
func adsStarted[Req any, Res proto.Message](t *testing.T, st interface {
	Send(Req) error
	Recv() (Res, error)
}, err error, req Req, count func(Res) int) func() (int, int) {
	t.Helper()
	if err == nil {
		err = st.Send(req)
	}
	if err != nil {
		t.Fatal(err)
	}
	return func() (int, int) {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return proto.Size(r), count(r)
	}
}

// TestUnwrittenChargeAllocatesOnce: a response that does not wait costs
// the budget one allocation, its charge, from take to the put of its
// buffer: the lists it is on link through it, and it is its buffer's pool.
func TestUnwrittenChargeAllocatesOnce(t *testing.T) {
	b := newUnwrittenBudget(1<<20, time.Hour, newGuardMetrics())
	var sc streamCharges
	buf := bufferPool.Get(4096)
	allocs := testing.AllocsPerRun(200, func() {
		c, err := b.take(context.Background(), 4096)
		if err != nil || !sc.add(c) {
			t.Fatal("charge refused")
		}
		p := c.pool(bufferPool)
		p.Put(buf)
		buf = bufferPool.Get(4096)
	})
	if allocs > 1 {
		t.Errorf("%.1f allocations per charged response, want 1", allocs)
	}
	if b.used != 0 || sc.open.first != nil || b.held.first != nil {
		t.Errorf("after every buffer was put back: %d bytes in use, listed %v %v", b.used, sc.open.first, b.held.first)
	}
}
