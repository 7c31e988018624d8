package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// gRFC A44 retries through the whole bridge: a policy file's retry reaches
// a real grpc-go xDS client (in RDS), which retries calls that real gRPC
// backends fail. Each call carries an id and what the backends are to do
// with it, in metadata: fail its first ra-fail attempts with status
// ra-code, then answer OK. The backends count the attempts of each call.
//
// The client is dialed as users dial: grpc-go retries are on by default,
// xDS configures no retry throttling (retryThrottling comes only from a
// service config), and the calls' messages are far below the per-call
// retry buffer (256 KiB).

// raN is how many attempts of a call the backends fail.
const raN = 2

// raRetryPolicy is greeter's policy with numRetries retries of UNAVAILABLE.
func raRetryPolicy(numRetries int) string {
	return fmt.Sprintf(`services:
  greeter:
    protocol: grpc
    retry: {retry_on: [unavailable], num_retries: %d, base_interval: 1ms, max_interval: 2ms}
`, numRetries)
}

// raAttempts counts the attempts of each call, over all the backends.
type raAttempts struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *raAttempts) add(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n[id]++
	return a.n[id]
}

func (a *raAttempts) of(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[id]
}

// raHealth is a health service whose Check fails the first attempts of a
// call as its metadata asks. Calls without an id are answered SERVING.
type raHealth struct {
	healthpb.UnimplementedHealthServer
	att *raAttempts
}

func (h *raHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := grpcmd.FromIncomingContext(ctx)
	get := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	id := get("ra-call")
	if id == "" {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}
	n := h.att.add(id)
	fail, _ := strconv.Atoi(get("ra-fail"))
	code, _ := strconv.Atoi(get("ra-code"))
	if n <= fail {
		return nil, status.Errorf(codes.Code(code), "call %s, attempt %d: failed as asked", id, n)
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// raRig is the bridge (a services file with greeter on two gRPC backends
// sharing one attempt count, and a policy file), and a grpc-go xDS client
// of xds:///greeter.
type raRig struct {
	br     *bridge
	c      *xdsClient
	att    *raAttempts
	policy string // the policy file's path
	seq    atomic.Int64
}

func raStart(t *testing.T, policy string) *raRig {
	t.Helper()
	att := &raAttempts{n: map[string]int{}}
	var bs []grpcBackend
	for range 2 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		healthpb.RegisterHealthServer(s, &raHealth{att: att})
		go s.Serve(lis)
		t.Cleanup(s.Stop)
		bs = append(bs, grpcBackend{port: uint32(lis.Addr().(*net.TCPAddr).Port), addr: lis.Addr().String()})
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(grpcServicesYAML("greeter", bs...)), 0o644); err != nil {
		t.Fatal(err)
	}
	br, policyPath := startPolicyBridge(t, dir, "", staticSource, policy)
	r := &raRig{br: br, c: dialXDS(t, br, "greeter"), att: att, policy: policyPath}
	// Ready: both backends answer (calls without an id always succeed).
	r.c.expect(t, bs...)
	return r
}

// raCall is one call of a run: its id, when it started, how it ended and
// how many attempts of it the backends saw.
type raCall struct {
	id       string
	start    time.Time
	err      error
	attempts int
}

// call makes one call (not wait-for-ready: the channel is ready) that the
// backends fail fail times with code.
func (r *raRig) call(fail int, code codes.Code) raCall {
	id := fmt.Sprintf("c%d", r.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = grpcmd.AppendToOutgoingContext(ctx, "ra-call", id, "ra-fail", strconv.Itoa(fail), "ra-code", strconv.Itoa(int(code)))
	c := raCall{id: id, start: time.Now()}
	_, c.err = r.c.health.Check(ctx, &healthpb.HealthCheckRequest{})
	c.attempts = r.att.of(id)
	return c
}

// outcome is a call's status code and attempts, as "OK/3".
func (c raCall) outcome() string {
	return fmt.Sprintf("%s/%d", status.Code(c.err), c.attempts)
}

// raTally counts calls by outcome.
func raTally(calls []raCall) map[string]int {
	out := map[string]int{}
	for _, c := range calls {
		out[c.outcome()]++
	}
	return out
}

// expectAll makes n calls the backends fail fail times with code, and
// checks each ends with want after attempts attempts.
func (r *raRig) expectAll(t *testing.T, what string, n, fail int, code, want codes.Code, attempts int) {
	t.Helper()
	var calls []raCall
	start := time.Now()
	for range n {
		calls = append(calls, r.call(fail, code))
	}
	got := raTally(calls)
	wantOutcome := fmt.Sprintf("%s/%d", want, attempts)
	t.Logf("%s: %d calls in %v: %v (want all %s)", what, n, time.Since(start).Round(time.Millisecond), got, wantOutcome)
	if got[wantOutcome] != n {
		for _, c := range calls {
			if c.outcome() != wantOutcome {
				t.Errorf("%s: call %s: %v after %d attempts", what, c.id, c.err, c.attempts)
				break
			}
		}
		t.Fatalf("%s: %d calls: %v; want all %s", what, n, got, wantOutcome)
	}
}

// TestGRPCPolicyRetriesA44: with retry {retry_on: [unavailable],
// num_retries: N} every call the backends fail N times with UNAVAILABLE
// succeeds after exactly N+1 attempts, and one failed N+1 times fails
// after N+1 attempts (no more); with N-1 retries every such call
// fails UNAVAILABLE after exactly N attempts; statuses not in retry_on
// (INTERNAL, RESOURCE_EXHAUSTED) are not retried under either.
func TestGRPCPolicyRetriesA44(t *testing.T) {
	r := raStart(t, raRetryPolicy(raN))
	const n = 60
	r.expectAll(t, fmt.Sprintf("num_retries %d, %d UNAVAILABLE", raN, raN), n, raN, codes.Unavailable, codes.OK, raN+1)
	r.expectAll(t, fmt.Sprintf("num_retries %d, 1 UNAVAILABLE", raN), n, 1, codes.Unavailable, codes.OK, 2)
	r.expectAll(t, fmt.Sprintf("num_retries %d, no failure", raN), n, 0, codes.Unavailable, codes.OK, 1)
	r.expectAll(t, fmt.Sprintf("num_retries %d, %d UNAVAILABLE", raN, raN+1), n, raN+1, codes.Unavailable, codes.Unavailable, raN+1)
	for _, code := range []codes.Code{codes.Internal, codes.ResourceExhausted} {
		r.expectAll(t, fmt.Sprintf("num_retries %d, %d %s", raN, raN, code), 20, raN, code, code, 1)
	}
	assertNoNACKs(t, r.br)

	// N-1 retries: the policy file changes (the client follows: waited
	// for, the change under traffic is TestGRPCPolicyRetryChangeA44's).
	writePolicy(t, r.policy, raRetryPolicy(raN-1))
	waitFor(t, 10*time.Second, fmt.Sprintf("a call to fail after %d attempts", raN), func() error {
		if c := r.call(raN, codes.Unavailable); c.outcome() != fmt.Sprintf("%s/%d", codes.Unavailable, raN) {
			return fmt.Errorf("call %s: %v after %d attempts", c.id, c.err, c.attempts)
		}
		return nil
	})
	r.expectAll(t, fmt.Sprintf("num_retries %d, %d UNAVAILABLE", raN-1, raN), n, raN, codes.Unavailable, codes.Unavailable, raN)
	r.expectAll(t, fmt.Sprintf("num_retries %d, %d UNAVAILABLE", raN-1, raN-1), n, raN-1, codes.Unavailable, codes.OK, raN)
	for _, code := range []codes.Code{codes.Internal, codes.ResourceExhausted} {
		r.expectAll(t, fmt.Sprintf("num_retries %d, %d %s", raN-1, raN, code), 20, raN, code, code, 1)
	}
	assertNoNACKs(t, r.br)
}

// TestGRPCPolicyRetryChangeA44 raises num_retries from N-1 to N while
// calls the backends fail N times run one after another: until the
// client has the change each call fails UNAVAILABLE after N attempts,
// from the first that succeeds (after N+1) every call succeeds; no NACK.
func TestGRPCPolicyRetryChangeA44(t *testing.T) {
	r := raStart(t, raRetryPolicy(raN-1))
	failed, ok := fmt.Sprintf("%s/%d", codes.Unavailable, raN), fmt.Sprintf("%s/%d", codes.OK, raN+1)
	var (
		mu    sync.Mutex
		calls []raCall
	)
	snapshot := func() []raCall {
		mu.Lock()
		defer mu.Unlock()
		return append([]raCall(nil), calls...)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c := r.call(raN, codes.Unavailable)
			mu.Lock()
			calls = append(calls, c)
			mu.Unlock()
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-done
		}
	}()
	const before = 50
	waitFor(t, 20*time.Second, fmt.Sprintf("%d calls before the change", before), func() error {
		if n := len(snapshot()); n < before {
			return fmt.Errorf("%d calls", n)
		}
		return nil
	})
	i0 := len(snapshot())
	t0 := time.Now()
	writePolicy(t, r.policy, raRetryPolicy(raN))
	const streak = 100 // calls in a row that succeed: the change is in
	waitFor(t, 15*time.Second, fmt.Sprintf("%d calls in a row to succeed", streak), func() error {
		cs := snapshot()[i0:]
		if len(cs) < streak {
			return fmt.Errorf("%d calls since the change", len(cs))
		}
		if got := raTally(cs[len(cs)-streak:]); got[ok] != streak {
			return fmt.Errorf("last %d calls: %v", streak, got)
		}
		return nil
	})
	close(stop)
	<-done
	all := snapshot()
	t.Logf("%d calls before the change: %v", i0, raTally(all[:i0]))
	if got := raTally(all[:i0]); got[failed] != i0 {
		t.Errorf("before the change, %d calls: %v; want all %s", i0, got, failed)
	}
	first := -1 // the first call since the change to succeed
	for i, c := range all[i0:] {
		if c.outcome() == ok {
			first = i0 + i
			break
		}
	}
	effect := all[first].start.Sub(t0)
	between, after := raTally(all[i0:first]), raTally(all[first:])
	t.Logf("num_retries %d → %d: first success %v after the rename; %d calls between (%v), %d from it (%v)",
		raN-1, raN, effect.Round(time.Millisecond), first-i0, between, len(all)-first, after)
	if between[failed] != first-i0 {
		t.Errorf("calls between the change and the first success: %v; want all %s", between, failed)
	}
	if after[ok] != len(all)-first {
		for _, c := range all[first:] {
			if c.outcome() != ok {
				t.Errorf("call %s, after the first success: %v after %d attempts", c.id, c.err, c.attempts)
				break
			}
		}
		t.Errorf("calls from the first success: %v; want all %s", after, ok)
	}
	if effect > 5*time.Second {
		t.Errorf("the change took %v; want within 5s", effect)
	}
	assertNoNACKs(t, r.br)
}
