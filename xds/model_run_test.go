package xds_test

// The driver: one history runs a cache and the real server on an
// in-memory listener, its clients on one gRPC connection, and performs
// the history's steps, checking the clients against the model after each.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

const lds = xds.ListenerType

// event is a response (or the end) of a client's stream.
type event struct {
	c     *mclient
	gen   int
	delta *discovery.DeltaDiscoveryResponse
	sotw  *discovery.DiscoveryResponse
	err   error
}

// evqueue is unbounded, so that the streams' readers never block the
// server.
type evqueue struct {
	mu     sync.Mutex
	evs    []event
	notify chan struct{}
}

func (q *evqueue) push(e event) {
	q.mu.Lock()
	q.evs = append(q.evs, e)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *evqueue) pop(deadline time.Time) (event, bool) {
	for {
		q.mu.Lock()
		if len(q.evs) > 0 {
			e := q.evs[0]
			q.evs = q.evs[1:]
			q.mu.Unlock()
			return e, true
		}
		q.mu.Unlock()
		d := time.Until(deadline)
		if d <= 0 {
			return event{}, false
		}
		t := time.NewTimer(d)
		select {
		case <-q.notify:
		case <-t.C:
		}
		t.Stop()
	}
}

type mrun struct {
	h       *mhistory
	cache   *xds.Cache
	w       *world
	conns   []*grpc.ClientConn // per visibility class
	clients []*mclient
	q       evqueue
	log     []string
	stepNo  int
	winSeq  int // w.seq at the last quiescence
	timeout time.Duration

	stop    context.CancelFunc
	srvDone chan error
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func newRun(h *mhistory) (*mrun, error) {
	opts := []xds.Option{xds.WithTypes(cds, eds, lds)}
	if h.maxBytes > 0 {
		opts = append(opts, xds.WithMaxResponseBytes(h.maxBytes))
	}
	if h.seed%2 == 1 {
		// Every delta pass finds its names with a cursor over the type's
		// sorted names, which only long ones do otherwise: the histories
		// are too small to reach it.
		opts = append(opts, xds.WithMinCursor(0))
	}
	c := xds.NewCache(opts...)
	if err := c.Apply(store.Change{TypeURL: lds, Upserts: []store.Resource{
		{Name: barrierNames[0], Msg: &listener.Listener{Name: barrierNames[0]}},
		{Name: barrierNames[1], Msg: &listener.Listener{Name: barrierNames[1]}},
	}}); err != nil {
		return nil, err
	}
	c.MarkReady()
	lis := bufconn.Listen(1 << 20)
	ctx, stop := context.WithCancel(context.Background())
	r := &mrun{h: h, cache: c, w: newWorld(), timeout: 10 * time.Second, stop: stop, srvDone: make(chan error, 1)}
	r.q.notify = make(chan struct{}, 1)
	if modelTLS == nil {
		stop()
		return nil, errors.New("model: setupModelTLS not called")
	}
	srv := xds.NewServer(c, xds.Options{Logger: quietLogger, Creds: modelTLS.server, Authorization: modelAuthz})
	go func() { r.srvDone <- srv.Run(ctx, lis) }()
	r.conns = make([]*grpc.ClientConn, len(modelVis))
	for _, cs := range h.clients {
		if r.conns[cs.vis] != nil {
			continue
		}
		conn, err := grpc.NewClient("passthrough:///model",
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(modelTLS.clients[cs.vis]))
		if err != nil {
			r.close()
			return nil, err
		}
		r.conns[cs.vis] = conn
	}
	for i, cs := range h.clients {
		mc := &mclient{id: i, delta: cs.delta, vis: cs.vis, types: map[string]*tstate{}}
		for _, typ := range modelTypes {
			ts := newTstate(typ)
			is := cs.init(typ)
			switch is.mode {
			case subLegacy:
				ts.in = interest{legacy: true, wild: true, names: map[string]bool{}}
			case subStar:
				ts.in = interest{wild: true, names: map[string]bool{}}
			case subNamed:
				for _, n := range is.names {
					ts.in.names[n] = true
				}
			}
			mc.types[typ] = ts
		}
		r.clients = append(r.clients, mc)
	}
	return r, nil
}

func (r *mrun) close() {
	for _, c := range r.clients {
		if c.cancel != nil {
			c.cancel()
			<-c.done
		}
	}
	for _, conn := range r.conns {
		if conn != nil {
			conn.Close()
		}
	}
	r.stop()
	<-r.srvDone
}

// connect opens a new stream for the client and sends its first requests:
// CDS, EDS (with the versions it holds, for delta), and the barrier's LDS.
func (r *mrun) connect(c *mclient) *violation {
	c.gen++
	gen := c.gen
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.cancel, c.done = cancel, done
	cl := discovery.NewAggregatedDiscoveryServiceClient(r.conns[c.vis])
	if c.delta {
		st, err := cl.DeltaAggregatedResources(ctx)
		if err != nil {
			close(done)
			return r.fail("stream-error", c, nil, "open: %v", err)
		}
		c.dsend = st.Send
		go func() {
			defer close(done)
			for {
				m, err := st.Recv()
				r.q.push(event{c: c, gen: gen, delta: m, err: err})
				if err != nil {
					return
				}
			}
		}()
	} else {
		st, err := cl.StreamAggregatedResources(ctx)
		if err != nil {
			close(done)
			return r.fail("stream-error", c, nil, "open: %v", err)
		}
		c.ssend = st.Send
		go func() {
			defer close(done)
			for {
				m, err := st.Recv()
				r.q.push(event{c: c, gen: gen, sotw: m, err: err})
				if err != nil {
					return
				}
			}
		}()
	}
	c.bcur, c.bnonce, c.bversion, c.bpending = 0, "", "", 0
	for _, typ := range modelTypes {
		ts := c.types[typ]
		if v := r.firstRequest(c, ts, ts.in.legacy); v != nil {
			return v
		}
	}
	return r.sendBarrier(c, true)
}

// reconnect ends the client's stream and opens another; the client keeps
// what it holds (a delta client tells the server in
// initial_resource_versions).
func (r *mrun) reconnect(c *mclient) *violation {
	c.cancel()
	<-c.done
	r.logf("%s reconnects", c)
	for _, ts := range c.types {
		clear(ts.owed)
		clear(ts.nacks)
		clear(ts.budget)
		clear(ts.hiddenOK)
		clear(ts.hiddenOwed)
		clear(ts.reanswer)
		for n := range ts.held {
			ts.budget[n] = 1
		}
		ts.afterNack = false
	}
	return r.connect(c)
}

func (r *mrun) publish(ops []op) *violation {
	var cu, eu []store.Resource
	var del []string
	for _, o := range ops {
		switch o.kind {
		case opCluster:
			cu = append(cu, store.Resource{Name: o.name, Msg: mkCluster(o.name, o.variant)})
		case opCLA:
			eu = append(eu, store.Resource{Name: o.name, Msg: mkCLA(o.name, o.variant, o.poison),
				DependsOn: &store.Dep{TypeURL: xds.ClusterType, Name: o.name}})
		case opDelete:
			del = append(del, o.name)
		}
	}
	// Make before break, as the bridge publishes.
	if err := r.cache.Apply(
		store.Change{TypeURL: cds, Upserts: cu},
		store.Change{TypeURL: eds, Upserts: eu},
		store.Change{TypeURL: eds, Deletes: del},
		store.Change{TypeURL: cds, Deletes: del},
	); err != nil {
		return r.fail("apply", nil, nil, "%v", err)
	}
	r.w.record(r.cache)
	if r.w.bad != "" {
		return r.fail("version-collision", nil, nil, "%s", r.w.bad)
	}
	r.logf("publish %s → served CDS %v EDS %v", fmtOps(ops), fmtServed(r.w.served[cds]), fmtServed(r.w.served[eds]))
	return nil
}

func fmtServed(m map[string]*mver) []string {
	var l []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		l = append(l, m[n].String())
	}
	return l
}

func (r *mrun) do(s *mstep) *violation {
	if s.kind == stPublish {
		return r.publish(s.ops)
	}
	c := r.clients[s.client]
	r.logf("step: %s", s)
	switch s.kind {
	case stSub:
		return r.changeSub(c, c.types[s.typ], s.names, nil)
	case stUnsub:
		return r.changeSub(c, c.types[s.typ], nil, s.names)
	case stWild:
		if s.on {
			return r.changeSub(c, c.types[s.typ], []string{"*"}, nil)
		}
		return r.changeSub(c, c.types[s.typ], nil, []string{"*"})
	case stReconnect:
		return r.reconnect(c)
	case stChange:
		return r.changeSub(c, c.types[s.typ], s.names, s.unsubs)
	}
	return nil
}

// run performs the history. It returns the first violation; r.stepNo is
// then the step after which it was found.
func (r *mrun) run() *violation {
	if len(r.h.pre) > 0 {
		if v := r.publish(r.h.pre); v != nil {
			return v
		}
	}
	r.winSeq = r.w.seq
	for _, c := range r.clients {
		if v := r.connect(c); v != nil {
			return v
		}
	}
	if v := r.settle(); v != nil {
		return v
	}
	for i := range r.h.steps {
		s := &r.h.steps[i]
		r.stepNo = i + 1
		if v := r.do(s); v != nil {
			return v
		}
		if s.noWait && i < len(r.h.steps)-1 {
			continue
		}
		if v := r.settle(); v != nil {
			return v
		}
	}
	return nil
}

// settle waits for quiescence and checks every client against the model.
func (r *mrun) settle() *violation {
	if v := r.quiesce(); v != nil {
		return v
	}
	for _, c := range r.clients {
		if v := r.checkHeld(c); v != nil {
			return v
		}
	}
	for _, c := range r.clients {
		for _, ts := range c.types {
			ts.quiesced()
		}
	}
	r.winSeq = r.w.seq
	return nil
}

// quiesce processes responses until nothing more is on its way. A barrier
// is a request (LDS, toggling between two listeners) that the server
// answers with one response: it handles a stream's requests in order and
// sends the responses they cause before the barrier's, so a client that
// processed no other response between sending a barrier and receiving its
// answer has nothing pending (only requests cause responses between
// publishes). Then every (stream, type) must have an open watch.
func (r *mrun) quiesce() *violation {
	deadline := time.Now().Add(r.timeout)
	wait := func(cs []*mclient) *violation {
		for slices.ContainsFunc(cs, func(c *mclient) bool { return c.bpending > 0 }) {
			if v := r.handleNext(deadline); v != nil {
				return v
			}
		}
		return nil
	}
	todo := r.clients
	for round := 0; len(todo) > 0; round++ {
		if round == 50 {
			return r.fail("no-quiescence", nil, nil, "clients still receiving responses after %d rounds", round)
		}
		if v := wait(todo); v != nil {
			return v
		}
		for _, c := range todo {
			c.mark = c.processed
			if v := r.sendBarrier(c, false); v != nil {
				return v
			}
		}
		if v := wait(todo); v != nil {
			return v
		}
		todo = slices.DeleteFunc(slices.Clone(todo), func(c *mclient) bool { return c.processed == c.mark })
	}
	want := map[string]int{}
	for _, c := range r.clients {
		for _, typ := range modelTypes {
			if c.types[typ].onStream {
				want[typ]++
			}
		}
	}
	for {
		st := r.cache.Stats()
		if st.Watches[cds] == want[cds] && st.Watches[eds] == want[eds] {
			return nil
		}
		if time.Now().After(deadline) {
			return r.fail("watches", nil, nil, "open watches CDS %d EDS %d, want %d and %d (one per stream and type)",
				st.Watches[cds], st.Watches[eds], want[cds], want[eds])
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (r *mrun) handleNext(deadline time.Time) *violation {
	ev, ok := r.q.pop(deadline)
	if !ok {
		return r.fail("no-quiescence", nil, nil, "timed out waiting for responses")
	}
	c := ev.c
	if ev.gen != c.gen {
		return nil // a stream the client left
	}
	if ev.err != nil {
		return r.fail("stream-error", c, nil, "stream ended: %v", ev.err)
	}
	if ev.delta != nil {
		return r.onDelta(c, ev.delta)
	}
	return r.onSotw(c, ev.sotw)
}

// fmt helpers for steps.

func fmtOps(ops []op) string {
	s := "["
	for i, o := range ops {
		if i > 0 {
			s += " "
		}
		s += o.String()
	}
	return s + "]"
}

func (o op) String() string {
	switch o.kind {
	case opCluster:
		return fmt.Sprintf("cds:%s/%d", o.name, o.variant)
	case opCLA:
		return fmt.Sprintf("eds:%s/%d%s", o.name, o.variant, poisonMark(o.poison))
	}
	return "del:" + o.name
}
