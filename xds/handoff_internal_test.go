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

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// handOffStream is a delta stream that records each response sent: its
// type, nonce, first resource's version, and whether it was sent inline
// by a commit (handOffPart: the goroutine that committed the change, or
// one it shared the streams with), not by a goroutine of the stream's.
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
}

type handOffSent struct {
	typ, nonce, version string
	inline              bool
}

func newHandOffStream(ctx context.Context) *handOffStream {
	s := &handOffStream{ctx: ctx, reqs: make(chan *discovery.DeltaDiscoveryRequest), recvs: make(chan struct{}, 1)}
	s.cond = sync.NewCond(&s.mu)
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
	s.mu.Lock()
	defer s.mu.Unlock()
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

// TestCommitResponseUnansweredLeftToHandler: a stream with a response
// its client has not answered (of another type) may have no write quota
// left in gRPC's flow control, so the commit's response is left to the
// stream's handler goroutine, which sends it.
func TestCommitResponseUnansweredLeftToHandler(t *testing.T) {
	c, str, _ := answeredAssignment(t, ClusterType)
	err := c.Apply(store.Change{TypeURL: ClusterType, Upserts: []store.Resource{{Name: "a", Msg: &cluster.Cluster{Name: "a"}}}})
	if err != nil {
		t.Fatal(err)
	}
	str.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: []string{"a"}})
	cds := str.waitSent(t, 2)[1]
	if cds.typ != ClusterType {
		t.Fatalf("sent %+v, want the cluster", cds)
	}
	commitAssignment(t, c, "a", 2, 1) // the cluster's response unanswered
	eds := str.waitSent(t, 3)[2]
	if eds.typ != EndpointType || eds.inline {
		t.Fatalf("sent %+v, want the assignment sent by the stream's handler", eds)
	}
	str.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: cds.nonce})
	str.request(t, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: eds.nonce})
	commitAssignment(t, c, "a", 3, 1) // all answered
	if sent := str.sentNow(); len(sent) != 4 || !sent[3].inline {
		t.Fatalf("sent %+v, want the fourth sent inline", sent)
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
