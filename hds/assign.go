package hds

import (
	"cmp"
	"slices"
)

// candidate is a connected checker as the assignment sees it.
type candidate struct {
	id       string
	hash     uint64 // hashString(id)
	locality string // "" when the checker's node names none
}

func newCandidate(id, locality string) candidate {
	return candidate{id: id, hash: hashString(id), locality: locality}
}

// assign picks the k checkers of key (hashString of the target's key)
// among cands by rendezvous hashing:
// each checker scores hash(key, checker), and the best scores win, first
// the best of each locality (so that the k checkers are spread over as many
// localities as there are), then the best of the rest. A checker joining
// or leaving moves only the keys it wins or held: the others keep their
// checkers. cands holds only the checkers able to run the key's check.
// The result is in score order; fewer than k if there are fewer checkers.
func assign(key uint64, cands []candidate, k int) []string {
	if k <= 0 || len(cands) == 0 {
		return nil
	}
	type scored struct {
		c     *candidate
		score uint64
	}
	s := make([]scored, len(cands))
	for i := range cands {
		s[i] = scored{&cands[i], mix(key ^ cands[i].hash)}
	}
	slices.SortFunc(s, func(a, b scored) int {
		if a.score != b.score {
			return cmp.Compare(b.score, a.score)
		}
		return cmp.Compare(a.c.id, b.c.id)
	})
	out := make([]string, 0, min(k, len(s)))
	taken := make([]bool, len(s))
	var seenLoc []string
	for i, c := range s {
		if len(out) == k {
			return out
		}
		if c.c.locality == "" || slices.Contains(seenLoc, c.c.locality) {
			continue
		}
		seenLoc = append(seenLoc, c.c.locality)
		taken[i] = true
		out = append(out, c.c.id)
	}
	for i, c := range s {
		if len(out) == k {
			break
		}
		if !taken[i] {
			out = append(out, c.c.id)
		}
	}
	return out
}

// hashString is FNV-1a (64 bits): stable across processes and restarts, so
// that replicas and restarts assign alike.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix is splitmix64's finalizer: FNV's low bits alone spread poorly.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
