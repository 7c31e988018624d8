package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// The proxyless gRPC client against every source type in its plainest
// config. Nothing in these configs names a locality (Consul's region is its
// datacenter), and grpc-go NACKs an assignment with a group that has no
// Locality ("EDS response contains a locality without ID"); expect fails
// at the first NACK.

// TestGRPCClientFileWithoutLocality: endpoints with an address and a port
// only; then a service mixing endpoints with and without a locality.
func TestGRPCClientFileWithoutLocality(t *testing.T) {
	bs := startGRPCBackends(t, 3)
	services := func(endpoints ...string) string {
		return "services:\n  greeter:\n    endpoints:\n      - " + strings.Join(endpoints, "\n      - ") + "\n"
	}
	plain := func(b grpcBackend) string { return fmt.Sprintf("{address: 127.0.0.1, port: %d}", b.port) }
	br := startBridge(t, services(plain(bs[0]), plain(bs[1])), "")
	c := dialXDS(t, br, "greeter")
	c.expect(t, bs[0], bs[1])

	br.writeServices(t, services(plain(bs[1]), fmt.Sprintf("{address: 127.0.0.1, port: %d, locality: {region: r1}}", bs[2].port)))
	c.expect(t, bs[1], bs[2])
}

// TestGRPCClientDNS: a STRICT_DNS and a LOGICAL_DNS service on one name
// with two addresses (two backends on one port of two loopback addresses);
// then the name moves to the second address only.
func TestGRPCClientDNS(t *testing.T) {
	port := freePort(t)
	bs := []grpcBackend{
		startGRPCBackend(t, fmt.Sprintf("127.0.0.21:%d", port)),
		startGRPCBackend(t, fmt.Sprintf("127.0.0.22:%d", port)),
	}
	d := startDNS(t)
	d.set("greeter.dns.test", "127.0.0.21", "127.0.0.22")
	br := startBridge(t, "services: {}\n", fmt.Sprintf(`
  - name: legacy
    dns:
      resolvers: [%q]
      timeout: 1s
      services:
        - name: greeter-strict
          hosts: [{name: greeter.dns.test, port: %[2]d}]
          dns_refresh_rate: 100ms
        - name: greeter-logical
          type: LOGICAL_DNS
          hosts: [{name: greeter.dns.test, port: %[2]d}]
          dns_refresh_rate: 100ms
`, d.addr, port))
	strict, logical := dialXDS(t, br, "greeter-strict"), dialXDS(t, br, "greeter-logical")
	strict.expect(t, bs[0], bs[1])
	logical.expect(t, bs[0]) // the first address of the answer

	d.set("greeter.dns.test", "127.0.0.22")
	strict.expect(t, bs[1])
	logical.expect(t, bs[1])
}

// TestGRPCClientConsul: instances registered in a real Consul with no
// check and the source's defaults.
func TestGRPCClientConsul(t *testing.T) {
	a := consultest.StartAgent(t, "dc1")
	bs := startGRPCBackends(t, 2)
	for i, b := range bs {
		a.Register(&api.AgentServiceRegistration{ID: fmt.Sprintf("web-%d", i+1), Name: "web", Address: "127.0.0.1", Port: int(b.port)})
	}
	br := startBridge(t, "services: {}\n", consulSource(a))
	c := dialXDS(t, br, "web")
	c.expect(t, bs[0], bs[1])

	a.Deregister("web-1")
	c.expect(t, bs[1])
}
