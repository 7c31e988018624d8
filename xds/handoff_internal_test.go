package xds

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// handOffStream is a delta stream that records each response sent: its
// type, nonce, first resource's version, and whether it was sent inline
// by a commit (handOffPart: the goroutine that committed the change, or
// one it shared the streams with), not by a goroutine of the stream's.
// A send encodes the response with the server's codec, as gRPC does, and
// puts its buffers back at once (written out), or, while the client does
// not read (hold), keeps them and, as gRPC's stream write quota does,
// waits while the bytes kept reach 64 KiB, until the stream ends.
type handOffStream struct {
	grpc.ServerStream
	ctx  context.Context
	reqs chan *discovery.DeltaDiscoveryRequest
	// recvs: a receive began (the request before it was handled).
	recvs chan struct{}
	// failAt: the send of this number (1-based) fails; 0: none.
	failAt int

	mu      sync.Mutex
	sending bool
	overlap bool
	sent    []handOffSent
	cond    *sync.Cond
	hold    bool
	held    []mem.BufferSlice
}

// writeQuota is gRPC's stream write quota (64 KiB) less the bytes held.
func (s *handOffStream) writeQuota() int {
	q := 64 << 10
	for _, b := range s.held {
		q -= b.Len()
	}
	return q
}

// read has the client read what it was sent: the buffers held are put
// back, and from now on at once.
func (s *handOffStream) read() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.held {
		b.Free()
	}
	s.held, s.hold = nil, false
	s.cond.Broadcast()
}

type handOffSent struct {
	typ, nonce, version string
	inline              bool
}

func newHandOffStream(ctx context.Context) *handOffStream {
	s := &handOffStream{ctx: ctx, reqs: make(chan *discovery.DeltaDiscoveryRequest), recvs: make(chan struct{}, 1)}
	s.cond = sync.NewCond(&s.mu)
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	return s
}

func (s *handOffStream) Context() context.Context { return s.ctx }

func (s *handOffStream) Send(r *discovery.DeltaDiscoveryResponse) error { return s.SendMsg(r) }

func (s *handOffStream) SendMsg(m any) error {
	var r *discovery.DeltaDiscoveryResponse
	switch v := m.(type) {
	case *wiredDelta:
		r = v.DeltaDiscoveryResponse
	case *discovery.DeltaDiscoveryResponse:
		r = v
	}
	buf := make([]byte, 64<<10)
	inline := strings.Contains(string(buf[:runtime.Stack(buf, false)]), "xds.handOffPart(")
	data, err := codec{}.Marshal(m)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.hold && s.writeQuota() <= 0 {
		if s.ctx.Err() != nil {
			data.Free()
			return s.ctx.Err()
		}
		s.cond.Wait()
	}
	if s.hold {
		s.held = append(s.held, data)
	} else {
		data.Free()
	}
	if s.sending {
		s.overlap = true
	}
	s.sending = true
	s.mu.Unlock()
	runtime.Gosched()
	s.mu.Lock()
	s.sending = false
	if s.failAt == len(s.sent)+1 {
		return errors.New("send failed")
	}
	sent := handOffSent{typ: r.GetTypeUrl(), nonce: r.GetNonce(), inline: inline}
	if res := r.GetResources(); len(res) > 0 {
		sent.version = res[0].GetVersion()
	}
	s.sent = append(s.sent, sent)
	s.cond.Broadcast()
	return nil
}

func (s *handOffStream) Recv() (*discovery.DeltaDiscoveryRequest, error) {
	select {
	case s.recvs <- struct{}{}:
	default:
	}
	select {
	case r := <-s.reqs:
		return r, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// request sends r and returns once it was handled (the next receive
// began).
func (s *handOffStream) request(t *testing.T, r *discovery.DeltaDiscoveryRequest) {
	t.Helper()
	select {
	case <-s.recvs: // the receive r goes to, or one before it
	default:
	}
	select {
	case s.reqs <- r:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream does not read requests")
	}
	select {
	case <-s.recvs:
	case <-time.After(5 * time.Second):
		t.Fatal("the request was not handled")
	}
}

// waitSent waits until n responses were sent and returns them.
func (s *handOffStream) waitSent(t *testing.T, n int) []handOffSent {
	t.Helper()
	timer := time.AfterFunc(5*time.Second, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(5 * time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.sent) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d responses sent, want %d: %+v", len(s.sent), n, s.sent)
		}
		s.cond.Wait()
	}
	return append([]handOffSent(nil), s.sent...)
}

// sentNow returns the responses sent so far.
func (s *handOffStream) sentNow() []handOffSent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]handOffSent(nil), s.sent...)
}

// handOffServed serves one delta stream of c, over ADS; the handler's
// error comes on the channel returned.
func handOffServed(t *testing.T, c *Cache) (*handOffStream, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	str := newHandOffStream(ctx)
	s := newDeltaServer(context.Background(), c, nil)
	done := make(chan error, 1)
	go func() { done <- s.DeltaStreamHandler(str, resource.AnyType) }()
	return str, done
}

// commitAssignment commits assignment n at version v, with endpoints
// endpoints of it.
func commitAssignment(t *testing.T, c *Cache, n string, v, endpoints int) {
	t.Helper()
	cla := &endpoint.ClusterLoadAssignment{ClusterName: n + "-" + strconv.Itoa(v)}
	eps := &endpoint.LocalityLbEndpoints{}
	for i := range endpoints {
		addr := &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
			Address: "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250), PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}}}
		eps.LbEndpoints = append(eps.LbEndpoints, &endpoint.LbEndpoint{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: addr}}})
	}
	if endpoints > 0 {
		cla.Endpoints = []*endpoint.LocalityLbEndpoints{eps}
	}
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{{Name: n, Msg: cla}}}); err != nil {
		t.Fatal(err)
	}
}

// answeredAssignment serves a stream subscribed to assignment "a" (at
// version 1) that ACKed its first response.
func answeredAssignment(t *testing.T, types ...string) (*Cache, *handOffStream, <-chan error) {
	t.Helper()
	c := NewCache(WithTypes(append(types, EndpointType)...))
	c.MarkReady()
	commitAssignment(t, c, "a", 1, 1)
	str, done := handOffServed(t, c)
	str.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
	first := str.waitSent(t, 1)[0]
	str.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: first.nonce})
	return c, str, done
}

// TestCommitResponseSentByCommitter: a change to a resource of a stream
// that answered every response is sent by the goroutine that committed
// it, before Apply returns, with no goroutine of the stream's woken.
func TestCommitResponseSentByCommitter(t *testing.T) {
	c, str, _ := answeredAssignment(t)
	for v := 2; v <= 4; v++ {
		before := len(str.sentNow())
		commitAssignment(t, c, "a", v, 1)
		sent := str.sentNow()
		if len(sent) != before+1 || !sent[before].inline {
			t.Fatalf("after the commit of version %d: sent %+v, want the response sent inline by the commit", v, sent)
		}
		str.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: sent[before].nonce})
	}
}

// TestCommitResponseUnwrittenLeftToHandler: while gRPC has not written
// out a response of the stream (its client is not reading), the stream's
// write quota may be spent, so a commit's response is left to the
// stream's handler goroutine, whatever the client answered; once all is
// written out, the next goes inline again.
func TestCommitResponseUnwrittenLeftToHandler(t *testing.T) {
	c, str, _ := answeredAssignment(t)
	str.mu.Lock()
	str.hold = true
	str.mu.Unlock()
	commitAssignment(t, c, "a", 2, 1) // written out before: inline, then held
	second := str.waitSent(t, 2)[1]
	if !second.inline {
		t.Fatalf("sent %+v, want it inline", second)
	}
	str.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: second.nonce})
	commitAssignment(t, c, "a", 3, 1)
	third := str.waitSent(t, 3)[2]
	if third.inline {
		t.Fatalf("sent %+v inline, with a response not written out", third)
	}
	str.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: third.nonce})
	str.read()
	commitAssignment(t, c, "a", 4, 1)
	if sent := str.sentNow(); len(sent) != 4 || !sent[3].inline {
		t.Fatalf("sent %+v, want the fourth sent inline", sent)
	}
}

// TestCommitResponseForgedACKDoesNotBlockCommit: a client that stopped
// reading, its stream's write quota spent by a large response, answers
// the nonce it was sent without having read it (nonces can be counted).
// The next commit's response is not sent inline, where gRPC's SendMsg
// would wait for quota for as long as the client likes, and with it the
// commit and every stream handed after this one: Apply returns, and a
// stream served after it gets its response.
func TestCommitResponseForgedACKDoesNotBlockCommit(t *testing.T) {
	c, stuck, _ := answeredAssignment(t)
	honest, _ := handOffServed(t, c)
	honest.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
	honest.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: honest.waitSent(t, 1)[0].nonce})
	stuck.mu.Lock()
	stuck.hold = true
	stuck.mu.Unlock()
	commitAssignment(t, c, "a", 2, 3000) // over the quota
	big := stuck.waitSent(t, 2)[1]
	stuck.mu.Lock()
	quota := stuck.writeQuota()
	stuck.mu.Unlock()
	if quota > 0 {
		t.Fatalf("write quota %d left after the large response", quota)
	}
	honest.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: honest.waitSent(t, 2)[1].nonce})
	stuck.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: big.nonce}) // forged
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		commitAssignment(t, c, "a", 3, 1)
	}()
	select {
	case <-applied:
	case <-time.After(5 * time.Second):
		t.Fatal("Apply blocked in a send to a stream with no write quota")
	}
	want := c.st.Type(EndpointType).Resources["a"].Version
	if sent := honest.waitSent(t, 3)[2]; sent.version != want {
		t.Fatalf("the honest stream was sent %+v, want version %s", sent, want)
	}
	stuck.mu.Lock()
	n := len(stuck.sent)
	stuck.mu.Unlock()
	if n != 2 {
		t.Fatalf("the stuck stream sent %d responses, want 2 (the third waits for quota)", n)
	}
}

// TestCommitResponseLargeLeftToHandler: a response of 1 KiB or more is
// counted in the unwritten budget, whose room a send may wait for, so
// the stream's handler goroutine sends it.
func TestCommitResponseLargeLeftToHandler(t *testing.T) {
	c, str, _ := answeredAssignment(t)
	commitAssignment(t, c, "a", 2, 100)
	sent := str.waitSent(t, 2)[1]
	if sent.inline || sent.version == "" {
		t.Fatalf("sent %+v, want the large assignment sent by the stream's handler", sent)
	}
	if e := c.st.Type(EndpointType).Resources["a"]; proto.Size(e.Msg) < 1024 {
		t.Fatalf("the assignment is %d bytes, not 1 KiB", proto.Size(e.Msg))
	}
}

// TestCommitResponsesSharedOverCores: a commit that answers many streams
// sends their responses inline in the committing goroutine and, on more
// than one core, in others it shares the streams with; every stream gets
// its response.
func TestCommitResponsesSharedOverCores(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	c.MarkReady()
	commitAssignment(t, c, "a", 1, 1)
	streams := make([]*handOffStream, 3*handOffShare)
	for i := range streams {
		str, _ := handOffServed(t, c)
		str.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
		str.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: str.waitSent(t, 1)[0].nonce})
		streams[i] = str
	}
	commitAssignment(t, c, "a", 2, 1)
	want := c.st.Type(EndpointType).Resources["a"].Version
	for i, str := range streams {
		if sent := str.waitSent(t, 2)[1]; sent.version != want || !sent.inline {
			t.Fatalf("stream %d: sent %+v, want version %s inline", i, sent, want)
		}
	}
}

// TestCommitResponseInlineErrorEndsStream: a send made inline that fails
// ends the stream with its error, through the stream's handler.
func TestCommitResponseInlineErrorEndsStream(t *testing.T) {
	c, str, done := answeredAssignment(t)
	str.mu.Lock()
	str.failAt = 2
	str.mu.Unlock()
	commitAssignment(t, c, "a", 2, 1)
	select {
	case err := <-done:
		if err == nil || err.Error() != "send failed" {
			t.Fatalf("the stream ended with %v, want the send's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end")
	}
}

// TestCommitResponsesEveryVersionReached: commits come back to back while
// the client answers each response after a random delay, so that each
// commit finds the stream answered or not, its lock free or held: the
// sends never overlap, nonces go up, and the last version committed is
// the last sent, some inline and some by the handler.
func TestCommitResponsesEveryVersionReached(t *testing.T) {
	c, str, _ := answeredAssignment(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		answered := 1
		for {
			str.mu.Lock()
			for len(str.sent) <= answered {
				select {
				case <-stop:
					str.mu.Unlock()
					return
				default:
				}
				str.cond.Wait()
			}
			nonce := str.sent[len(str.sent)-1].nonce
			answered = len(str.sent)
			str.mu.Unlock()
			if rand.IntN(2) == 0 {
				time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
			}
			select {
			case str.reqs <- &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: nonce}:
			case <-stop:
				return
			}
		}
	}()
	commits := 3000
	if testing.Short() {
		commits = 300
	}
	for v := 2; v <= commits+1; v++ {
		commitAssignment(t, c, "a", v, 1)
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond)
		}
	}
	want := c.st.Type(EndpointType).Resources["a"].Version
	deadline := time.Now().Add(10 * time.Second)
	for {
		sent := str.sentNow()
		if last := sent[len(sent)-1]; last.version == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last version (%s) was never sent; last sent %+v", want, sent[len(sent)-1])
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	str.mu.Lock()
	str.cond.Broadcast()
	str.mu.Unlock()
	wg.Wait()
	sent := str.sentNow()
	inline := 0
	for i, s := range sent {
		if s.inline {
			inline++
		}
		if i > 0 {
			a, _ := strconv.Atoi(sent[i-1].nonce)
			b, _ := strconv.Atoi(s.nonce)
			if b <= a {
				t.Fatalf("nonce %s sent after %s", s.nonce, sent[i-1].nonce)
			}
		}
	}
	if str.overlap {
		t.Fatal("two sends overlapped")
	}
	t.Logf("%d responses for %d commits, %d inline", len(sent), commits, inline)
	if inline == 0 || inline == len(sent)-1 {
		t.Fatalf("%d of %d responses inline: the run did not mix the two ways", inline, len(sent))
	}
}

// TestWrittenPoolCountsUntilPutBack: a response the codec encodes for a
// followed stream, a small one too, ends with a sentinel of no bytes,
// counted until gRPC puts the message's buffers back (what its writer
// does once it wrote the last byte).
func TestWrittenPoolCountsUntilPutBack(t *testing.T) {
	var w writtenPool
	r := &discovery.DeltaDiscoveryResponse{TypeUrl: EndpointType, Nonce: "1"}
	data, err := codec{}.Marshal(&wiredDelta{DeltaDiscoveryResponse: r, written: &w})
	if err != nil {
		t.Fatal(err)
	}
	if w.writtenOut() {
		t.Fatal("a response handed to gRPC is counted written out")
	}
	var back discovery.DeltaDiscoveryResponse
	if err := proto.Unmarshal(data.Materialize(), &back); err != nil || back.GetNonce() != "1" {
		t.Fatalf("encoded %v, %v", &back, err)
	}
	if last := data[len(data)-1]; last.Len() != 0 || len(data) != 2 {
		t.Fatalf("encoded as %d buffers, the last of %d bytes; want the encoding and an empty sentinel", len(data), last.Len())
	}
	data.Free()
	if !w.writtenOut() {
		t.Fatal("a response whose buffer gRPC put back is still counted")
	}
}

// TestWrittenPoolUnfollowedNeverWrittenOut: a stream none of whose
// encodings the server's codec made (a gRPC server with its own codec)
// is never found written out, so nothing is sent to it inline.
func TestWrittenPoolUnfollowedNeverWrittenOut(t *testing.T) {
	var w writtenPool
	if w.writtenOut() {
		t.Fatal("a stream with no encoding followed is found written out")
	}
}
