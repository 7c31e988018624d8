package xds

import "github.com/xdsbridge/xdsbridge/xds/store"

// nameWalk walks two sorted lists of distinct names as one: their union,
// in order, each name once. A delta pass walks a client's rest (up to the
// whole type while its sync is in parts) and the request's names so, as
// far as its response goes, without merging them into a new list: a
// request costs what it names and what it sends, not the length of the
// rest. The names of a before the next one of b are found by a search
// from where the walk is, not by a comparison each.
type nameWalk struct {
	a, b []string
	i, j int // a[:i] and b[:j] walked
	stop int // a[i:stop] are before b[j]
}

func newNameWalk(a, b []string) nameWalk {
	w := nameWalk{a: a, b: b}
	w.findStop()
	return w
}

// findStop finds how far a goes before b[j].
func (w *nameWalk) findStop() {
	if w.j == len(w.b) {
		w.stop = len(w.a)
		return
	}
	w.stop, _ = store.SearchFrom(w.a, w.i, w.b[w.j])
}

// next returns the next name, or false at the end.
func (w *nameWalk) next() (string, bool) {
	if w.i < w.stop {
		w.i++
		return w.a[w.i-1], true
	}
	if w.j == len(w.b) {
		return "", false
	}
	n := w.b[w.j]
	w.j++
	if w.i < len(w.a) && w.a[w.i] == n {
		w.i++
	}
	w.findStop()
	return n, true
}

// tails returns the names of each list not walked yet.
func (w *nameWalk) tails() (a, b []string) { return w.a[w.i:], w.b[w.j:] }

// len returns how many names the walk has at most.
func (w *nameWalk) len() int { return len(w.a) + len(w.b) }
