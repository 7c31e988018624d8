package hds

import (
	"io"
	"log/slog"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	healthv3 "github.com/envoyproxy/go-control-plane/envoy/service/health/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/healthcheck"
)

// fuzzServer is a server with three TCP targets assigned to one checker,
// and that checker.
func fuzzServer(t testing.TB) (*Server, *checker) {
	s, err := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.SetTargets(targets(3, healthcheck.TypeTCP))
	c := &checker{id: "envoy#1", node: "envoy", protos: map[string]bool{healthcheck.TypeTCP: true}, targets: map[*target]bool{}, wake: make(chan struct{}, 1), lastReport: time.Now()}
	s.mu.Lock()
	s.checkers[c.id] = c
	s.reassign(time.Now())
	s.mu.Unlock()
	return s, c
}

// A checker's EndpointHealthResponse is outside input: whatever it holds
// (unknown clusters, endpoints and statuses, no address, duplicates), the
// server applies it without failing, and every verdict stays one of
// unknown, healthy, unhealthy.
func FuzzHDSReport(f *testing.F) {
	_, c := fuzzServer(f)
	for _, st := range []corev3.HealthStatus{corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNHEALTHY, corev3.HealthStatus_DRAINING} {
		r := reportOf(c.pending)
		for _, ch := range r.GetClusterEndpointsHealth() {
			for _, le := range ch.GetLocalityEndpointsHealth() {
				for _, eh := range le.GetEndpointsHealth() {
					eh.HealthStatus = st
				}
			}
		}
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, c := fuzzServer(t)
		r := &healthv3.EndpointHealthResponse{}
		if proto.Unmarshal(b, r) != nil {
			return
		}
		s.report(c, r)
		for k, st := range s.Snapshot() {
			switch st.Verdict {
			case healthcheck.Unknown, healthcheck.Healthy, healthcheck.Unhealthy:
			default:
				t.Fatalf("%v: verdict %v", k, st.Verdict)
			}
		}
	})
}
