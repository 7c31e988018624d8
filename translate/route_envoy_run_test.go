package translate

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/xdsbridge/xdsbridge/internal/testbin"
)

// runEnvoy starts Envoy with one listener per route configuration, each
// holding it inline, and the rig's backends as clusters; it returns the
// listeners' addresses by route name once Envoy is ready. Envoy picks its
// ports (0) and names them: ports picked beforehand may be taken. The
// clusters in missing are left out, as clusters nobody publishes.
func runEnvoy(t *testing.T, rig *grpcRig, rcs map[string]*route.RouteConfiguration, missing ...string) map[string]string {
	t.Helper()
	envoy := requireEnvoy(t)
	er := envoyRig{ports: map[string]int{}, backend: func(c string) string { return rig.backend(t, c) }, missing: missing}
	for n := range rcs {
		er.ports[n] = 0
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "bootstrap.json")
	if err := os.WriteFile(path, envoyBootstrapWith(t, rcs, er), 0o644); err != nil {
		t.Fatal(err)
	}
	e := testbin.StartEnvoy(t, envoy, path)
	e.WaitReady(t, 20*time.Second)
	b, err := e.Get("/listeners?format=json")
	if err != nil {
		t.Fatal(err)
	}
	var ls struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal([]byte(b), &ls); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	addrs := map[string]string{}
	for _, l := range ls.ListenerStatuses {
		sa := l.LocalAddress.SocketAddress
		addrs[strings.TrimPrefix(l.Name, "route-")] = net.JoinHostPort(sa.Address, fmt.Sprint(sa.PortValue))
	}
	for n := range rcs {
		if addrs[n] == "" {
			t.Fatalf("envoy has no listener for %s: %s", n, b)
		}
	}
	return addrs
}

// envoyCall makes one call through Envoy, for the virtual host of
// service, and returns the cluster that answered (from its trailer) and
// the call's error.
func envoyCall(t *testing.T, conn *grpc.ClientConn, method string, md ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = grpcmd.NewOutgoingContext(ctx, grpcmd.Pairs(md...))
	}
	var tr grpcmd.MD
	err := conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Trailer(&tr))
	if c := tr.Get("x-cluster"); len(c) == 1 {
		return c[0], err
	}
	return "", err
}

func envoyConn(t *testing.T, addr, service string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(service))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Envoy 1.40 routes gRPC calls as the policy says, and where it differs
// from gRPC clients, as the diagnostics say: it sees content-type, it
// rewrites prefixes, it retries and times out as configured.
func TestPolicyRoutesEnvoyRouting(t *testing.T) {
	requireEnvoy(t)
	rig := startGRPCRig(t)
	cases := map[string]routeCase{}
	for _, tc := range routeCases() {
		cases[tc.name] = tc
	}
	rcs := map[string]*route.RouteConfiguration{}
	services := map[string]string{}
	for _, n := range []string{"paths", "headers", "methods", "redirect", "default-subset", "fractions", "datacenters"} {
		c := cases[n]
		rcs[n], _ = RouteConfigFor(c.service, parseServicePolicy(t, c.service, c.yaml))
		services[n] = c.service
	}
	retries := parseServicePolicy(t, "svc", `
timeout: 30s
routes:
  - match: {prefix: /grpc.G/}
    retry: {retry_on: [unavailable], num_retries: 3, base_interval: 1ms, max_interval: 2ms}
  - match: {prefix: /envoy.E/}
    retry: {retry_on: [5xx, reset], num_retries: 3, base_interval: 1ms}
  - match: {prefix: /many.M/}
    retry: {retry_on: [cancelled, unavailable], num_retries: 10, base_interval: 1ms, max_interval: 1ms}
  - match: {prefix: /slow.S/}
    timeout: 300ms
`)
	rcs["retries"], _ = RouteConfigFor("svc", retries)
	services["retries"] = "svc"
	addrs := runEnvoy(t, rig, rcs)

	type call struct {
		method string
		md     []string
		want   string
	}
	full := []string{"x-tenant", "test", "x-region", "eu-west", "x-host", "a.internal", "x-trace", "zzz", "x-id", "123", "x-debug", "1", "x-shard", "-5"}
	for _, tc := range []struct {
		name  string
		calls []call
	}{
		{"paths", []call{
			{"/a.A/Get", nil, "a"},
			{"/b.B/Get", nil, "b"},
			{"/c.C/List", nil, "c"},
			{"/d.D/Get", nil, "d"},
			{"/E.E/GET", nil, "e"},
			{"/b.B/GetX", nil, "f"},
		}},
		{"headers", []call{
			{"/x.X/Get", full, "matched"},
			// Envoy sees the content-type gRPC clients do not.
			{"/x.X/Get", []string{"x-trace", "abc"}, "by-content-type"},
		}},
		{"methods", []call{{"/static/x", nil, "web"}}}, // gRPC calls are POSTs
		{"fractions", []call{{"/c/x", nil, "all"}, {"/d/x", nil, "greeter"}}},
		{"redirect", []call{
			{"/self/x", nil, "greeter/v2"},
			{"/legacy/x", nil, "old-api/legacy"},
			{"/x.X/Get", nil, "greeter/v2"},
		}},
		{"default-subset", []call{{"/self/x", nil, "web/v1"}, {"/x.X/Get", nil, "web/v1"}}},
		{"datacenters", []call{{"/dc3/x", nil, "billing/v1"}, {"/x.X/Get", nil, "api"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := envoyConn(t, addrs[tc.name], services[tc.name])
			for _, cl := range tc.calls {
				got, err := envoyCall(t, conn, cl.method, cl.md...)
				if got != cl.want || status.Code(err) != codes.Unimplemented {
					t.Errorf("%s %v: reached %q (%v), want %q", cl.method, cl.md, got, err, cl.want)
				}
			}
		})
	}

	t.Run("prefix_rewrite", func(t *testing.T) {
		conn := envoyConn(t, addrs["default-subset"], "web")
		got, err := envoyCall(t, conn, "/v2/rewritten.R/Get")
		if got != "web/v2" || status.Code(err) != codes.Unimplemented {
			t.Errorf("reached %q (%v), want web/v2", got, err)
		}
		if n, m := rig.attemptsOf("/rewritten.R/Get"), rig.attemptsOf("/v2/rewritten.R/Get"); n != 1 || m != 0 {
			t.Errorf("the backend saw /rewritten.R/Get %d times and /v2/rewritten.R/Get %d times, want 1 and 0", n, m)
		}
	})

	t.Run("retries", func(t *testing.T) {
		conn := envoyConn(t, addrs["retries"], "svc")
		for _, tc := range []struct {
			method   string
			attempts int
		}{
			{"/grpc.G/Unavailable", 4},
			{"/envoy.E/Unavailable", 1}, // a gRPC error is HTTP 200: not a 5xx
			{"/many.M/Unavailable", 11},
			{"/other.O/Unavailable", 1},
		} {
			_, err := envoyCall(t, conn, tc.method)
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s: %v, want UNAVAILABLE", tc.method, err)
			}
			if got := rig.attemptsOf(tc.method); got != tc.attempts {
				t.Errorf("%s: %d attempts, want %d", tc.method, got, tc.attempts)
			}
		}
		start := time.Now()
		_, err := envoyCall(t, conn, "/slow.S/Sleep")
		if took := time.Since(start); err == nil || took > 3*time.Second {
			t.Errorf("/slow.S/Sleep: %v after %v, want an error after 300ms", err, took)
		}
	})
}
