//go:build unix

package healthcheck

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// HTTP and gRPC checks that dial at every probe (reuse_connection: false)
// with the bridge out of file descriptors keep their verdicts, as TCP
// checks do (TestTCPCheckOutOfDescriptorsKeepsVerdict).
func TestDialingChecksOutOfDescriptorsKeepVerdict(t *testing.T) {
	for _, typ := range []string{TypeHTTP, TypeGRPC} {
		t.Run(typ, func(t *testing.T) {
			tg := dialingTarget(t, typ)
			outlives(t, startChecker(t, Options{}, tg), tg.Key(), outOfDescriptors)
		})
	}
}

// Out of local ports (connect: EADDRNOTAVAIL, no free port in the
// ephemeral range), TCP checks on the connect loop and on the portable path,
// and HTTP and gRPC checks that dial at every probe, keep their verdicts
// and count the probes as the bridge's own errors.
func TestChecksOutOfLocalPortsKeepVerdict(t *testing.T) {
	tcpProbers(t, func(t *testing.T, start func(...Target) *harness) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go acceptAll(ln)
		tg := Target{Host: hostOf(ln.Addr()), Check: tcpCheck(100, func(c *Config) { c.UnhealthyThreshold = 2 })}
		outlives(t, start(tg), tg.Key(), outOfPorts)
	})
	for _, typ := range []string{TypeHTTP, TypeGRPC} {
		t.Run(typ, func(t *testing.T) {
			tg := dialingTarget(t, typ)
			outlives(t, startChecker(t, Options{}, tg), tg.Key(), outOfPorts)
		})
	}
}

// A gRPC server whose health service answers UNAVAILABLE with the words
// of a local shortage (its own, or its upstream's) is failing: the words
// are the bridge's own only in the error of the bridge's dial. A server
// that forwards its grpc-go upstream's status (a gRPC proxy) carries the
// very words grpc-go gives a failed dial of its own.
func TestGRPCServerShortageIsFailure(t *testing.T) {
	for name, msg := range map[string]string{
		"own words":     "upstream connect error: dial tcp 10.0.0.1:80: connect: " + syscall.EADDRNOTAVAIL.Error(),
		"grpc-go words": `connection error: desc = "` + grpcDialError + `: dial tcp 10.0.0.1:80: connect: ` + syscall.EMFILE.Error() + `"`,
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			healthpb.RegisterHealthServer(srv, shortOfPorts{msg: msg})
			go srv.Serve(ln)
			t.Cleanup(srv.Stop)
			tg := Target{Host: hostOf(ln.Addr()), Check: Config{Type: TypeGRPC, Interval: ms(20), Timeout: ms(1000), UnhealthyThreshold: 2, GRPC: &GRPCConfig{}}}
			h := startChecker(t, Options{}, tg)
			h.waitVerdict(tg.Key(), Unhealthy)
			if st := h.state(tg.Key()); st.LastResult != "fail" || probeCount(t, h, TypeGRPC, "error") != 0 {
				t.Errorf("last result %q (%s), %v probes counted as the bridge's errors", st.LastResult, st.LastError, probeCount(t, h, TypeGRPC, "error"))
			}
		})
	}
}

// shortOfPorts is a health service out of local ports: it answers
// UNAVAILABLE with msg.
type shortOfPorts struct {
	healthpb.UnimplementedHealthServer
	msg string
}

func (s shortOfPorts) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, status.Error(codes.Unavailable, s.msg)
}

// outlives waits for key's first Healthy verdict, causes a shortage of
// the bridge's own between its probes (which checks them) and waits for a
// probe that succeeds once the shortage is over.
func outlives(t *testing.T, h *harness, key TargetKey, shortage func(*testing.T, *harness, TargetKey)) {
	t.Helper()
	h.waitVerdict(key, Healthy)
	shortage(t, h, key)
	waitFor(t, "a probe that succeeds", func() bool { return h.state(key).LastResult == "ok" })
}

// dialingTarget starts a healthy backend of typ (http or grpc) and returns
// a target checking it that dials at every probe (reuse_connection: false).
func dialingTarget(t *testing.T, typ string) Target {
	noReuse := func(c *Config) {
		f := false
		c.ReuseConnection = &f
		c.UnhealthyThreshold = 2
		c.Interval = ms(100)
	}
	var tg Target
	switch typ {
	case TypeHTTP:
		b := newHTTPBackend(t)
		tg = Target{Host: b.host, Check: httpCheck(100, noReuse)}
	case TypeGRPC:
		_, hs, cl := startGRPC(t, "127.0.0.1:0")
		hs.SetServingStatus("echo", healthpb.HealthCheckResponse_SERVING)
		tg = Target{Host: hostOf(cl.Addr()), Check: Config{Type: TypeGRPC, Timeout: ms(1000), GRPC: &GRPCConfig{ServiceName: "echo"}}}
		noReuse(&tg.Check)
	}
	return tg
}

// outOfDescriptors takes the process's descriptors away between two
// probes of key (localShortage).
func outOfDescriptors(t *testing.T, h *harness, key TargetKey) {
	t.Helper()
	localShortage(t, h, key, func() func() { return limitFDs(t) }, "too many open files")
}

// outOfPorts makes the connects of key's probes fail as with no free
// ephemeral port (localShortage).
func outOfPorts(t *testing.T, h *harness, key TargetKey) {
	t.Helper()
	localShortage(t, h, key, func() func() {
		errno := syscall.EADDRNOTAVAIL
		connectFault.Store(&errno)
		restore := func() { connectFault.Store(nil) }
		t.Cleanup(restore)
		return restore
	}, "cannot assign requested address")
}

// localShortage waits for a quiet moment between probes of key, causes a
// shortage of the bridge's own (take, which returns its undoing) for four
// probes and checks that they ended as the bridge's own error, with words
// in the error, counted under result="error" and not as failures, without
// changing the verdict.
func localShortage(t *testing.T, h *harness, key TargetKey, take func() (restore func()), words string) {
	t.Helper()
	waitFor(t, "a quiet moment between probes", func() bool {
		st := h.state(key)
		return !st.NextProbe.IsZero() && time.Until(st.NextProbe) > 30*time.Millisecond
	})
	typ := h.state(key).Type
	errors0, fails0, timed0 := probeCount(t, h, typ, "error"), probeCount(t, h, typ, "fail"), timedProbes(t, h, typ)
	restore := take()
	before := h.state(key).Probes
	st := h.waitProbes(key, before+4)
	var errs, fails float64
	waitFor(t, "four probes counted", func() bool {
		errs, fails = probeCount(t, h, typ, "error"), probeCount(t, h, typ, "fail")
		return errs+fails >= errors0+fails0+4
	})
	timed := timedProbes(t, h, typ)
	restore()
	if st.Verdict != Healthy || st.ConsecutiveFailures != 0 {
		t.Errorf("out of %s, the verdict changed: %+v", words, st)
	}
	if st.LastResult != "error" || !strings.Contains(st.LastError, words) {
		t.Errorf("out of %s: last result %q, error %q", words, st.LastResult, st.LastError)
	}
	if fails != fails0 || errs < errors0+4 {
		t.Errorf("out of %s: %v probes counted as errors, %v as failures; want 4 or more errors", words, errs-errors0, fails-fails0)
	}
	if timed != timed0 {
		t.Errorf("out of %s: %d probe durations observed; want none", words, timed-timed0)
	}
}

// timedProbes reads the count of
// xdsbridge_healthcheck_probe_duration_seconds{type} of h's checker.
func timedProbes(t *testing.T, h *harness, typ string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.c.m.latency.WithLabelValues(typ).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// probeCount reads xdsbridge_healthcheck_probes_total{type,result} of h's
// checker.
func probeCount(t *testing.T, h *harness, typ, result string) float64 {
	t.Helper()
	var m dto.Metric
	if err := h.c.m.probes.WithLabelValues(typ, result).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
