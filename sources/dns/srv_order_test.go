package dns

import (
	"context"
	"net"
	"testing"

	mdns "github.com/miekg/dns"
)

// DNS servers rotate the records of an answer. When two SRV records lead
// to the same address and port (two target names for one host, or one
// target under two priorities), the host published must not depend on
// the order the server happened to send them in: the endpoint's priority,
// weight and hostname flipped with the rotation, a new version pushed to
// every client each time with nothing changed (and the host moved in and
// out of the failover priority).
func TestSRVDuplicateHostOrderIndependent(t *testing.T) {
	hdr := func(name string, typ uint16) mdns.RR_Header {
		return mdns.RR_Header{Name: name, Rrtype: typ, Class: mdns.ClassINET, Ttl: 30}
	}
	srvA := &mdns.SRV{Hdr: hdr("svc.example.", mdns.TypeSRV), Priority: 10, Weight: 5, Port: 80, Target: "a.example."}
	srvB := &mdns.SRV{Hdr: hdr("svc.example.", mdns.TypeSRV), Priority: 20, Weight: 7, Port: 80, Target: "b.example."}
	srvC := &mdns.SRV{Hdr: hdr("svc.example.", mdns.TypeSRV), Priority: 10, Weight: 1, Port: 80, Target: "c.example."}
	resolveIn := func(order ...mdns.RR) []string {
		r := &resolver{servers: []string{"127.0.0.1:53"}, metrics: newMetrics("rv2"),
			exchangeFn: func(_ context.Context, _ string, q *mdns.Msg) (*mdns.Msg, error) {
				m := new(mdns.Msg)
				m.SetReply(q)
				switch q.Question[0].Qtype {
				case mdns.TypeSRV:
					m.Answer = order
				case mdns.TypeA:
					ip := net.IPv4(10, 0, 0, 1) // a and b are one host
					if q.Question[0].Name == "c.example." {
						ip = net.IPv4(10, 0, 0, 2)
					}
					m.Answer = []mdns.RR{&mdns.A{Hdr: hdr(q.Question[0].Name, mdns.TypeA), A: ip}}
				}
				return m, nil
			}}
		addrs, err := r.resolve(context.Background(), lookupSpec{fqdn: "svc.example.", name: "svc.example", family: FamilyV4, srv: true})
		if err != nil {
			t.Fatal(err)
		}
		svc := &service{targets: []*target{{answer: addrs}}}
		var out []string
		for _, e := range svc.endpoints() {
			out = append(out, e.Key().String()+" "+e.Hostname+" p"+string(rune('0'+e.Priority))+" w"+string(rune('0'+e.Weight)))
		}
		return out
	}
	first := resolveIn(srvA, srvB, srvC)
	second := resolveIn(srvB, srvC, srvA)
	t.Logf("a,b,c: %v", first)
	t.Logf("b,c,a: %v", second)
	if len(first) != len(second) {
		t.Fatalf("endpoints differ with the answer order: %v vs %v", first, second)
	}
	for i := range first {
		if first[i] != second[i] {
			t.Fatalf("endpoints differ with the answer order: %v vs %v", first, second)
		}
	}
	// The host is kept at its best (lowest) priority, as the Consul
	// source keeps a host in two datacenters at the lower one.
	if first[0] != "10.0.0.1:80 a.example p0 w5" {
		t.Fatalf("10.0.0.1:80 published as %q, want it at priority 0 from a.example", first[0])
	}
}
