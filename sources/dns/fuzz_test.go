package dns

import (
	"context"
	"net"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/xdsbridge/xdsbridge/sources"
)

func fuzzAnswer(t testing.TB, rrs ...mdns.RR) []byte {
	m := new(mdns.Msg)
	m.SetQuestion("svc.example.", mdns.TypeA)
	m.Response = true
	m.Answer = rrs
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzAnswers feeds a DNS response (wire format, as a server would send it)
// to every query of a resolution, in every mode (A/AAAA families, SRV), and
// checks the endpoints it yields.
func FuzzAnswers(f *testing.F) {
	hdr := func(name string, t uint16) mdns.RR_Header {
		return mdns.RR_Header{Name: name, Rrtype: t, Class: mdns.ClassINET, Ttl: 30}
	}
	f.Add(fuzzAnswer(f, &mdns.A{Hdr: hdr("svc.example.", mdns.TypeA), A: net.IPv4(10, 0, 0, 1)}))
	f.Add(fuzzAnswer(f, &mdns.AAAA{Hdr: hdr("svc.example.", mdns.TypeAAAA), AAAA: net.ParseIP("2001:db8::1")},
		&mdns.A{Hdr: hdr("svc.example.", mdns.TypeA), A: net.IPv4(10, 0, 0, 2)}))
	f.Add(fuzzAnswer(f, &mdns.CNAME{Hdr: hdr("svc.example.", mdns.TypeCNAME), Target: "t.example."},
		&mdns.A{Hdr: hdr("t.example.", mdns.TypeA), A: net.IPv4(10, 0, 0, 3)}))
	f.Add(fuzzAnswer(f, &mdns.SRV{Hdr: hdr("svc.example.", mdns.TypeSRV), Priority: 1, Weight: 5, Port: 8080, Target: "svc.example."},
		&mdns.SRV{Hdr: hdr("svc.example.", mdns.TypeSRV), Priority: 2, Port: 0, Target: "svc.example."},
		&mdns.SRV{Hdr: hdr("svc.example.", mdns.TypeSRV), Port: 9, Target: "."},
		&mdns.A{Hdr: hdr("svc.example.", mdns.TypeA), A: net.IPv4(10, 0, 0, 4)}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		resp := new(mdns.Msg)
		if err := resp.Unpack(data); err != nil {
			return // the client drops what does not parse
		}
		r := &resolver{servers: []string{"127.0.0.1:53"}, metrics: newMetrics("fuzz"),
			exchangeFn: func(context.Context, string, *mdns.Msg) (*mdns.Msg, error) { return resp, nil }}
		for _, spec := range []lookupSpec{
			{fqdn: "svc.example.", name: "svc.example", port: 443, family: FamilyAuto},
			{fqdn: "svc.example.", name: "svc.example", port: 443, family: FamilyAll},
			{fqdn: "svc.example.", name: "svc.example", port: 1, family: FamilyV4},
			{fqdn: "svc.example.", name: "svc.example", port: 65535, family: FamilyV6},
			{fqdn: "svc.example.", name: "svc.example", family: FamilyAuto, srv: true},
			{fqdn: "svc.example.", name: "svc.example", family: FamilyAll, srv: true},
		} {
			addrs, err := r.resolve(context.Background(), spec)
			if err != nil {
				continue
			}
			svc := &service{targets: []*target{{answer: addrs}}}
			seen := map[sources.HostKey]bool{}
			if err := sources.CheckNormal(svc.endpoints()); err != nil {
				t.Fatalf("%+v: endpoints not in normal form: %v", spec, err)
			}
			for _, e := range svc.endpoints() {
				if err := sources.ValidateEndpoint("endpoint", e); err != nil {
					t.Fatalf("%+v: %v", spec, err)
				}
				if seen[e.Key()] {
					t.Fatalf("%+v: %s twice", spec, e.Key())
				}
				seen[e.Key()] = true
				if e.Hostname == "" {
					t.Fatalf("%+v: endpoint %s without a hostname", spec, e.Key())
				}
			}
		}
	})
}
