package dns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
)

// ednsBufSize is the EDNS0 UDP payload size advertised in queries (the DNS
// flag day 2020 recommendation). Larger answers come back truncated and are
// retried over TCP.
const ednsBufSize = 1232

// hostAddr is one address a resolution produced.
type hostAddr struct {
	IP   netip.Addr
	Port uint32
	// TTL is the record's TTL, lowered to the smallest TTL of the CNAME (and,
	// in SRV mode, SRV) records that led to it, as Envoy does.
	TTL uint32
	// Hostname is the DNS name the endpoint is published with: the configured
	// name, or the SRV target in SRV mode.
	Hostname string
	// Weight and Priority come from SRV records (priority ranked 0, 1, ...).
	Weight   uint32
	Priority uint32
}

func (h hostAddr) key() netip.AddrPort { return netip.AddrPortFrom(h.IP, uint16(h.Port)) }

// lookupSpec is what a worker needs to resolve one configured name. It is
// immutable once built, so workers read it without locking.
type lookupSpec struct {
	fqdn   string // absolute name queried
	name   string // name as configured, without the trailing dot
	port   uint32
	family Family
	srv    bool
}

// resolver sends queries to a list of servers. It is safe for concurrent use.
type resolver struct {
	servers []string // "ip:port"
	timeout time.Duration
	metrics *metrics
	// exchangeFn, when set, answers every query instead of the network
	// (fuzz and unit tests).
	exchangeFn func(ctx context.Context, server string, m *mdns.Msg) (*mdns.Msg, error)
}

// rcodeError is a response whose rcode means failure (SERVFAIL, REFUSED...).
type rcodeError struct{ rcode int }

func (e rcodeError) Error() string { return "rcode " + rcodeName(e.rcode) }

func rcodeName(rc int) string {
	if s, ok := mdns.RcodeToString[rc]; ok {
		return s
	}
	return fmt.Sprintf("RCODE%d", rc)
}

// resolve resolves one configured name into addresses. A nil error with no
// addresses is a successful resolution with zero hosts (NXDOMAIN, NODATA).
// The returned addresses keep answer order, de-duplicated by address and port.
func (r *resolver) resolve(ctx context.Context, spec lookupSpec) ([]hostAddr, error) {
	var (
		out []hostAddr
		err error
	)
	if spec.srv {
		out, err = r.resolveSRV(ctx, spec)
	} else {
		var recs []hostAddr
		recs, err = r.resolveFamily(ctx, spec.fqdn, spec.family)
		for _, rec := range recs {
			rec.Port, rec.Hostname = spec.port, spec.name
			out = append(out, rec)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", spec.name, err)
	}
	if spec.srv {
		return dedupeSRV(out), nil
	}
	return dedupe(out), nil
}

// dedupeSRV drops repeated address:port pairs of an SRV resolution,
// keeping, where the first one stood, the one of the lowest priority
// (then the lowest target name, then the highest weight): servers rotate
// SRV records, and the host published must not change with their order.
func dedupeSRV(in []hostAddr) []hostAddr {
	at := make(map[netip.AddrPort]int, len(in))
	out := in[:0]
	for _, h := range in {
		i, dup := at[h.key()]
		if !dup {
			at[h.key()] = len(out)
			out = append(out, h)
			continue
		}
		if c := cmp.Or(cmp.Compare(h.Priority, out[i].Priority), cmp.Compare(h.Hostname, out[i].Hostname), cmp.Compare(out[i].Weight, h.Weight)); c < 0 {
			out[i] = h
		}
	}
	return out
}

// dedupe drops repeated address:port pairs, keeping the first.
func dedupe(in []hostAddr) []hostAddr {
	seen := make(map[netip.AddrPort]struct{}, len(in))
	out := in[:0]
	for _, h := range in {
		if _, dup := seen[h.key()]; dup {
			continue
		}
		seen[h.key()] = struct{}{}
		out = append(out, h)
	}
	return out
}

// resolveFamily looks up a name's addresses as Envoy's dns_lookup_family says:
// AUTO asks for AAAA and falls back to A when that yields no address (for any
// reason, as c-ares does); ALL asks for both and succeeds if either produced
// addresses or both succeeded.
func (r *resolver) resolveFamily(ctx context.Context, fqdn string, fam Family) ([]hostAddr, error) {
	switch fam {
	case FamilyV4:
		return r.lookup(ctx, fqdn, mdns.TypeA)
	case FamilyV6:
		return r.lookup(ctx, fqdn, mdns.TypeAAAA)
	case FamilyAuto:
		v6, err := r.lookup(ctx, fqdn, mdns.TypeAAAA)
		if err == nil && len(v6) > 0 {
			return v6, nil
		}
		return r.lookup(ctx, fqdn, mdns.TypeA)
	default: // FamilyAll
		v4, err4 := r.lookup(ctx, fqdn, mdns.TypeA)
		v6, err6 := r.lookup(ctx, fqdn, mdns.TypeAAAA)
		all := append(v4, v6...)
		if len(all) > 0 {
			return all, nil
		}
		return nil, errors.Join(err4, err6)
	}
}

// resolveSRV looks up SRV records and then each target's addresses. Priorities
// are ranked into Envoy priorities 0, 1, ...; a target of "." (service not
// available) and a record with port 0 are skipped. Any failed target lookup fails the resolution.
func (r *resolver) resolveSRV(ctx context.Context, spec lookupSpec) ([]hostAddr, error) {
	resp, err := r.query(ctx, spec.fqdn, mdns.TypeSRV)
	if err != nil || resp == nil {
		return nil, err
	}
	cnameTTL := minCNAMETTL(resp)
	var srvs []*mdns.SRV
	for _, rr := range resp.Answer {
		// Port 0 cannot be connected to: such a record is skipped like a
		// target of ".".
		if s, ok := rr.(*mdns.SRV); ok && s.Target != "." && s.Port != 0 {
			srvs = append(srvs, s)
		}
	}
	rank := priorityRanks(srvs)
	addrs := make(map[string][]hostAddr)
	var out []hostAddr
	for _, s := range srvs {
		recs, done := addrs[s.Target]
		if !done {
			if recs, err = r.resolveFamily(ctx, s.Target, spec.family); err != nil {
				return nil, fmt.Errorf("SRV target %s: %w", strings.TrimSuffix(s.Target, "."), err)
			}
			addrs[s.Target] = recs
		}
		for _, rec := range recs {
			rec.Port = uint32(s.Port)
			rec.Hostname = strings.TrimSuffix(s.Target, ".")
			rec.TTL = min(rec.TTL, s.Hdr.Ttl, cnameTTL)
			rec.Weight, rec.Priority = uint32(s.Weight), rank[s.Priority]
			out = append(out, rec)
		}
	}
	return out, nil
}

// priorityRanks maps each distinct SRV priority to its rank (lowest first).
func priorityRanks(srvs []*mdns.SRV) map[uint16]uint32 {
	ps := make([]uint16, 0, len(srvs))
	for _, s := range srvs {
		ps = append(ps, s.Priority)
	}
	slices.Sort(ps)
	ps = slices.Compact(ps)
	rank := make(map[uint16]uint32, len(ps))
	for i, p := range ps {
		rank[p] = uint32(i)
	}
	return rank
}

// lookup resolves one A or AAAA question into addresses.
func (r *resolver) lookup(ctx context.Context, fqdn string, qtype uint16) ([]hostAddr, error) {
	resp, err := r.query(ctx, fqdn, qtype)
	if err != nil || resp == nil {
		return nil, err
	}
	cnameTTL := minCNAMETTL(resp)
	var out []hostAddr
	for _, rr := range resp.Answer {
		var ip net.IP
		switch v := rr.(type) {
		case *mdns.A:
			if qtype == mdns.TypeA {
				ip = v.A
			}
		case *mdns.AAAA:
			if qtype == mdns.TypeAAAA {
				ip = v.AAAA
			}
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		out = append(out, hostAddr{IP: a.Unmap(), TTL: min(rr.Header().Ttl, cnameTTL)})
	}
	return out, nil
}

func minCNAMETTL(resp *mdns.Msg) uint32 {
	ttl := uint32(1<<32 - 1)
	for _, rr := range resp.Answer {
		if c, ok := rr.(*mdns.CNAME); ok {
			ttl = min(ttl, c.Hdr.Ttl)
		}
	}
	return ttl
}

// query asks the servers in order until one gives an answer that classifies
// as success. It returns (nil, nil) for NXDOMAIN, the response for NOERROR
// (NODATA included) and an error for anything else: SERVFAIL, REFUSED and
// other rcodes, timeouts and network errors, like Envoy's c-ares resolver.
func (r *resolver) query(ctx context.Context, fqdn string, qtype uint16) (*mdns.Msg, error) {
	m := new(mdns.Msg)
	m.SetQuestion(fqdn, qtype)
	m.SetEdns0(ednsBufSize, false)
	var lastErr error
	for _, server := range r.servers {
		resp, err := r.exchange(ctx, server, m)
		r.metrics.observeQuery(qtype, resp, err)
		switch {
		case err != nil:
			lastErr = fmt.Errorf("%s %s via %s: %w", mdns.TypeToString[qtype], strings.TrimSuffix(fqdn, "."), server, err)
		case resp.Rcode == mdns.RcodeSuccess:
			return resp, nil
		case resp.Rcode == mdns.RcodeNameError:
			return nil, nil
		default:
			lastErr = fmt.Errorf("%s %s via %s: %w", mdns.TypeToString[qtype], strings.TrimSuffix(fqdn, "."), server, rcodeError{resp.Rcode})
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// exchange sends m over UDP and repeats it over TCP if the answer is truncated.
func (r *resolver) exchange(ctx context.Context, server string, m *mdns.Msg) (*mdns.Msg, error) {
	if r.exchangeFn != nil {
		return r.exchangeFn(ctx, server, m)
	}
	resp, err := r.exchangeNet(ctx, "udp", server, m)
	if err == nil && resp.Truncated {
		r.metrics.tcpFallbacks.Inc()
		resp, err = r.exchangeNet(ctx, "tcp", server, m)
	}
	return resp, err
}

// exchangeNet does one exchange bounded by the per-query timeout; cancelling
// ctx aborts it at once.
func (r *resolver) exchangeNet(ctx context.Context, network, server string, m *mdns.Msg) (*mdns.Msg, error) {
	qctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	c := &mdns.Client{Net: network, Timeout: r.timeout}
	conn, err := c.DialContext(qctx, server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(qctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	resp, _, err := c.ExchangeWithConnContext(qctx, m, conn)
	if err == nil {
		return resp, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var ne net.Error
	if qctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) {
		return nil, timeoutError{r.timeout}
	}
	return nil, err
}

// timeoutError is a query that got no answer within the per-query timeout.
type timeoutError struct{ after time.Duration }

func (e timeoutError) Error() string { return fmt.Sprintf("no answer within %s (timeout)", e.after) }

// sortAddrs orders addresses by address and port (for comparing answer sets).
func sortAddrs(h []hostAddr) {
	slices.SortFunc(h, func(a, b hostAddr) int {
		if c := a.IP.Compare(b.IP); c != 0 {
			return c
		}
		return cmp.Compare(a.Port, b.Port)
	})
}
