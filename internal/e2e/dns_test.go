package e2e

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	mdns "github.com/miekg/dns"
)

// dnsServer is an in-process authoritative server whose A records the test
// changes.
type dnsServer struct {
	mu    sync.Mutex
	recs  map[string][]string // fqdn → IPs
	addr  string
	fault atomic.Int32 // dnsNormal, dnsServFail or dnsDrop
}

// The dnsServer's fault modes: answer, SERVFAIL every query, or drop every
// query unanswered (the resolver times out).
const (
	dnsNormal int32 = iota
	dnsServFail
	dnsDrop
)

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	d := &dnsServer{recs: map[string][]string{}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.addr = pc.LocalAddr().String()
	srv := &mdns.Server{PacketConn: pc, Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(r)
		switch d.fault.Load() {
		case dnsDrop:
			return
		case dnsServFail:
			m.Rcode = mdns.RcodeServerFailure
			w.WriteMsg(m)
			return
		}
		m.Authoritative = true
		q := r.Question[0]
		d.mu.Lock()
		ips, ok := d.recs[q.Name]
		d.mu.Unlock()
		if !ok {
			m.Rcode = mdns.RcodeNameError
		}
		if q.Qtype == mdns.TypeA {
			for _, ip := range ips {
				m.Answer = append(m.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 1}, A: net.ParseIP(ip)})
			}
		}
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return d
}

func (d *dnsServer) set(name string, ips ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.recs[mdns.Fqdn(name)] = ips
}

// TestEnvoyFollowsDNSName reaches a backend known only by a DNS name, then
// repoints the name: traffic moves. Both backends listen on one port, on two
// loopback addresses.
func TestEnvoyFollowsDNSName(t *testing.T) {
	port := freePort(t)
	b1 := startBackendAt(t, "b1", fmt.Sprintf("127.0.0.11:%d", port))
	b2 := startBackendAt(t, "b2", fmt.Sprintf("127.0.0.12:%d", port))
	d := startDNS(t)
	d.set("billing.legacy.test", "127.0.0.11")
	br := startBridge(t, "services: {}\n", fmt.Sprintf(`
  - name: legacy
    dns:
      resolvers: [%q]
      timeout: 1s
      services:
        - name: web
          type: STRICT_DNS
          hosts: [{name: billing.legacy.test, port: %d}]
          dns_refresh_rate: 100ms
          dns_lookup_family: V4_ONLY
`, d.addr, port))
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	ev.waitTraffic(t, b1)
	d.set("billing.legacy.test", "127.0.0.12")
	ev.waitTraffic(t, b2)
	d.set("billing.legacy.test", "127.0.0.11", "127.0.0.12")
	ev.waitTraffic(t, b1, b2)
	ev.assertNoRejections(t)
}
