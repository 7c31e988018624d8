package xds

import (
	"slices"
	"sort"
)

// The parts of a sotw response of a type whose responses need not carry
// every resource (EDS, RDS): bounded in size, the rest following each ACK
// (sotwHeld.rest).

// A sotw client acknowledges each response with a request that lists
// every name it subscribes to again: a client of n assignments, its
// response split into parts of k, sends n/k requests of n names. So a part
// carries at least sotwPartNames times the bytes of those names, up to
// maxSotwPartFactor times the cache's bound (1 MiB at the default): the
// requests that acknowledge a first sync cost a few times its names, not
// n²/k (a sotw Envoy listing 5,000 assignments of 242 bytes under names of
// 9 characters gets 3 parts of up to 440 KB, not 42 of 32 KiB, each
// answered by a request of 55 KB).
const (
	sotwPartNames     = 8
	maxSotwPartFactor = 32
)

// sotwPartBytes is the bound of a sotw response's part for a client
// listing names of listedBytes (encoded), the cache's bound being
// maxBytes (> 0).
func sotwPartBytes(maxBytes, listedBytes int) int {
	return max(maxBytes, min(sotwPartNames*listedBytes, maxSotwPartFactor*maxBytes))
}

// walkRest considers the names of the state's rest not among seen, in
// order, and stops at the first one to send that the response would not
// fit (bound); those not looked at are left for the next response
// (restLeft). The names to send found before (changed) count in sorted
// order with those of the rest: the response carries the parts a full
// check would, which sorts every name to send and cuts them at the bound.
func (p *sotwPass) walkRest(seen map[string]struct{}) {
	rest := p.ss.rest
	if len(rest) == 0 {
		return
	}
	ts, maxBytes, limit := p.ts, p.maxBytes, p.ss.limit
	sort.Strings(p.changed)
	found := p.changed
	before := found // sorted: counted while they come before the rest's name
	size, count := envelope(ts.URL), 0
	for i, n := range rest {
		if _, dup := seen[n]; dup {
			continue
		}
		for len(before) > 0 && before[0] < n {
			size += ts.Resources[before[0]].AnySize
			count++
			before = before[1:]
		}
		k := len(p.changed)
		p.consider(n)
		if len(p.changed) == k {
			continue
		}
		add := ts.Resources[n].AnySize
		if count > 0 && ((maxBytes > 0 && size+add > maxBytes) || (limit > 0 && count >= limit)) {
			// Past the bound: n and every name after it, of the rest
			// or found before, wait for the next response.
			sent := len(found) - len(before)
			p.changed = append(found[:sent:sent], p.changed[len(found):k]...)
			p.restLeft = mergeNames(slices.Clone(before), rest[i:])
			return
		}
		size += add
		count++
	}
}

// bound cuts the changed names (sorted) of a type that need not carry
// everything as a delta response is bounded, and returns the names cut,
// which the state keeps in its rest.
func (p *sotwPass) bound() (cut []string) {
	if p.ts.FullState {
		return nil
	}
	maxBytes, limit := p.maxBytes, p.ss.limit
	total := envelope(p.ts.URL)
	for i, n := range p.changed {
		total += p.ts.Resources[n].AnySize
		if i > 0 && ((maxBytes > 0 && total > maxBytes) || (limit > 0 && i >= limit)) {
			cut = p.changed[i:]
			p.changed = p.changed[:i:i]
			return cut
		}
	}
	return nil
}
