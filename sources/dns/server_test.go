package dns

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

// reply is what the test server answers to one name and type.
type reply struct {
	rcode    int
	rrs      []string // zone-file records for the answer section
	truncUDP bool     // over UDP, answer with TC set and no records
	drop     bool     // never answer (the client times out)
}

type qkey struct {
	name  string
	qtype uint16
}

// testServer is an in-process DNS server on 127.0.0.1 (UDP and TCP on one
// port) whose answers the test scripts. It is safe for concurrent use.
type testServer struct {
	t    testing.TB
	addr string

	mu      sync.Mutex
	replies map[qkey]reply
	counts  map[qkey]int
	tcp     int // queries over TCP
	changed chan struct{}
}

func newTestServer(t testing.TB) *testServer {
	t.Helper()
	ts := &testServer{t: t, replies: map[qkey]reply{}, counts: map[qkey]int{}, changed: make(chan struct{})}
	var pc net.PacketConn
	var ln net.Listener
	for i := 0; ; i++ {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		if i > 20 {
			t.Fatal(err)
		}
	}
	ts.addr = pc.LocalAddr().String()
	udp := &mdns.Server{PacketConn: pc, Handler: mdns.HandlerFunc(ts.serve("udp"))}
	tcp := &mdns.Server{Listener: ln, Handler: mdns.HandlerFunc(ts.serve("tcp"))}
	for _, srv := range []*mdns.Server{udp, tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = udp.ShutdownContext(ctx)
		_ = tcp.ShutdownContext(ctx)
	})
	return ts
}

func (ts *testServer) serve(network string) func(mdns.ResponseWriter, *mdns.Msg) {
	return func(w mdns.ResponseWriter, req *mdns.Msg) {
		q := req.Question[0]
		k := qkey{strings.ToLower(q.Name), q.Qtype}
		ts.mu.Lock()
		rep, ok := ts.replies[k]
		ts.counts[k]++
		if network == "tcp" {
			ts.tcp++
		}
		close(ts.changed)
		ts.changed = make(chan struct{})
		ts.mu.Unlock()
		if rep.drop {
			return
		}
		m := new(mdns.Msg)
		m.SetReply(req)
		if !ok {
			m.Rcode = mdns.RcodeNameError
			_ = w.WriteMsg(m)
			return
		}
		m.Rcode = rep.rcode
		if rep.truncUDP && network == "udp" {
			m.Truncated = true
			_ = w.WriteMsg(m)
			return
		}
		for _, s := range rep.rrs {
			rr, err := mdns.NewRR(s)
			if err != nil {
				panic(err)
			}
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	}
}

// set scripts the reply to name (absolute or not) and qtype.
func (ts *testServer) set(name string, qtype uint16, r reply) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.replies[qkey{mdns.Fqdn(name), qtype}] = r
}

// answer scripts a NOERROR answer.
func (ts *testServer) answer(name string, qtype uint16, rrs ...string) {
	ts.set(name, qtype, reply{rcode: mdns.RcodeSuccess, rrs: rrs})
}

func (ts *testServer) count(name string, qtype uint16) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.counts[qkey{mdns.Fqdn(name), qtype}]
}

func (ts *testServer) tcpCount() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.tcp
}

// waitQueries waits until the server has seen at least n queries for name
// and qtype in total.
func (ts *testServer) waitQueries(name string, qtype uint16, n int, timeout time.Duration) {
	ts.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	k := qkey{mdns.Fqdn(name), qtype}
	for {
		ts.mu.Lock()
		got, ch := ts.counts[k], ts.changed
		ts.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			ts.t.Fatalf("timed out waiting for %d queries of %s/%s (got %d)", n, name, mdns.TypeToString[qtype], got)
		}
	}
}

// running is a source running against a sink until the test ends.
type running struct {
	src  *Source
	sink *sourcestest.Sink
	done chan error
}

// startSource builds a source from cfg (a JSON-encodable value) and runs it.
func startSource(t *testing.T, name string, cfg any, env sources.Env) *running {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(name, raw, env)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return runSource(t, src.(*Source))
}

func runSource(t *testing.T, src *Source) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{src: src, sink: sourcestest.NewSink(), done: make(chan error, 1)}
	go func() { r.done <- src.Run(ctx, r.sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	return r
}

// waitEndpoints waits until the last update has service svc with exactly want.
func (r *running) waitEndpoints(t *testing.T, svc string, want []sources.Endpoint) {
	t.Helper()
	r.sink.WaitFor(t, 10*time.Second, "endpoints of "+svc, func(us []sources.Update, _ []error) bool {
		if len(us) == 0 {
			return false
		}
		s, ok := sourcestest.Service(us[len(us)-1], svc)
		return ok && sameEndpoints(s.Endpoints, want) && len(s.Endpoints) == len(want)
	})
}

// ep builds the endpoint a name resolves to.
func ep(addr string, port uint32, host string) sources.Endpoint {
	return sources.Endpoint{Address: addr, Port: port, Hostname: host, Health: sources.HealthUnknown}
}

// svcCfg is a JSON-encodable service block with test-friendly defaults.
type svcCfg = map[string]any

func srcCfg(addr string, services ...svcCfg) map[string]any {
	return map[string]any{"resolvers": []string{addr}, "timeout": "300ms", "services": services}
}
