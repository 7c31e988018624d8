package hds

// HDS capacity at datacenter scale: the bridge's CPU per checker report and
// per reassignment, with 50,000 targets and 20 checkers (k = 2, so 5,000
// targets a checker):
//
//	go test -run '^$' -bench 'HDS' -benchtime 20x ./hds/
//
// The checkers are simulated in the process: each iteration decodes one
// checker's EndpointHealthResponse (all of its 5,000 endpoints) from the
// wire form and merges it, which is the bridge's work per report.

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	healthv3 "github.com/envoyproxy/go-control-plane/envoy/service/health/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
)

const (
	capTargets  = 50000
	capCheckers = 20
)

func capacityServer(b *testing.B) *Server {
	s, err := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ts := make([]healthcheck.Target, capTargets)
	for i := range ts {
		ts[i] = healthcheck.Target{
			Host:  sources.HostKey{Address: fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), Port: 8080},
			Check: healthcheck.Config{Type: healthcheck.TypeHTTP, Interval: decode.Duration(5 * time.Second)},
		}
	}
	s.SetTargets(ts)
	s.mu.Lock()
	for i := range capCheckers {
		c := &checker{
			id: "envoy-" + strconv.Itoa(i), node: "envoy-" + strconv.Itoa(i),
			locality: []string{"/zone-a/", "/zone-b/"}[i%2],
			protos:   map[string]bool{healthcheck.TypeHTTP: true, healthcheck.TypeTCP: true},
			wake:     make(chan struct{}, 1), lastReport: time.Now(),
		}
		s.checkers[c.id] = c
	}
	s.reassign(time.Now())
	s.mu.Unlock()
	return s
}

// reportOf is what an Envoy reports for the checker's specifier: every
// endpoint healthy.
func reportOf(spec *healthv3.HealthCheckSpecifier) *healthv3.EndpointHealthResponse {
	resp := &healthv3.EndpointHealthResponse{}
	for _, c := range spec.GetClusterHealthChecks() {
		ceh := &healthv3.ClusterEndpointsHealth{ClusterName: c.GetClusterName()}
		for _, le := range c.GetLocalityEndpoints() {
			leh := &healthv3.LocalityEndpointsHealth{}
			for _, e := range le.GetEndpoints() {
				leh.EndpointsHealth = append(leh.EndpointsHealth, &healthv3.EndpointHealth{Endpoint: e, HealthStatus: corev3.HealthStatus_HEALTHY})
			}
			ceh.LocalityEndpointsHealth = append(ceh.LocalityEndpointsHealth, leh)
		}
		resp.ClusterEndpointsHealth = append(resp.ClusterEndpointsHealth, ceh)
	}
	return resp
}

func BenchmarkHDSReport50kTargets20Checkers(b *testing.B) {
	s := capacityServer(b)
	var cs []*checker
	var wire [][]byte
	for i := range capCheckers {
		c := s.checkers["envoy-"+strconv.Itoa(i)]
		raw, err := proto.Marshal(reportOf(c.pending))
		if err != nil {
			b.Fatal(err)
		}
		cs, wire = append(cs, c), append(wire, raw)
	}
	cpu := cpuTime()
	n := 0
	for i := 0; b.Loop(); i++ {
		r := &healthv3.EndpointHealthResponse{}
		if err := proto.Unmarshal(wire[i%capCheckers], r); err != nil {
			b.Fatal(err)
		}
		s.report(cs[i%capCheckers], r)
		n++
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(n)/1e6, "cpu-ms/op")
	b.ReportMetric(float64(capTargets*DefaultK/capCheckers), "endpoints/report")
}

// cpuTime is the process's CPU time (user and system) so far: the
// benchmarks report it per operation besides the wall-clock time, which
// a loaded host inflates.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A checker leaving and coming back: two reassignments of 50,000 targets,
// with the specifiers of the checkers whose share changed.
func BenchmarkHDSReassign50kTargets20Checkers(b *testing.B) {
	s := capacityServer(b)
	c := s.checkers["envoy-0"]
	cpu := cpuTime()
	n := 0
	for b.Loop() {
		s.mu.Lock()
		delete(s.checkers, c.id)
		s.reassign(time.Now())
		s.checkers[c.id] = c
		s.reassign(time.Now())
		s.mu.Unlock()
		n++
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(n)/1e6, "cpu-ms/op")
}
