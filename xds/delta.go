package xds

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Delta client state. The returned-resources map the cache hands the
// go-control-plane server for a delta stream is compact: genKey → G says
// that the client holds, of every resource it was interested in at
// generation G, the version current at G (and knows that the others do not
// exist), except the names of the rest (restKey). Any other entry is an
// explicit version (initial_resource_versions of a reconnecting client,
// before its first response, or "" where the server asks for a resend).
// Keeping G instead of 5,000 name → version entries per Envoy is what
// keeps a fleet of Envoys subscribed to every assignment within memory;
// the versions at G are recovered from each resource's commit generation
// (entry.gen) and the deletion generations (deletedAt).
//
// The state also records what each response not yet answered carried
// (sentPrefix + nonce). A response counts as held once it is sent, and
// stops counting if the client rejects it (NACK): what it carried joins the
// rest, to be sent again in two halves (limitKey holds the plan: the
// sizes of the next responses), a rejected half halved again, until the
// resource the client refuses is alone: log2(n)+1 rejections for one bad
// resource among n, and the search goes on where it was for the next one.
// That resource, at that version, is then remembered (rejectedKey) and not
// sent again; a bad resource costs only itself, and a new version of it is
// sent as usual. Everything lives in the stream's own map, so it goes with
// the stream.

// nameSeq is a sorted list of names to look at: a slice, or names joined by
// sep (a kept rest, read without copying).
type nameSeq struct {
	list   []string
	joined string
}

// deltaState is a delta client's state as read when its watch is created.
type deltaState struct {
	// complete: the state is compact, at generation gen; wildOn: the
	// client subscribed to the wildcard since gen, so of the names it does
	// not subscribe by name it held none; stale: gen is older than the
	// change log.
	complete, wildOn, stale bool
	wildChanged, changed    bool
	gen                     uint64
	// newSub: names the request subscribes to. The client may hold them or
	// not; the protocol asks to send them (or report them removed) either way.
	newSub   map[string]struct{}
	rest     []string // sorted: names the client may hold older versions of
	allRest  bool     // every name looked at is of the rest (the ACK of a part)
	plan     plan     // sizes of the next responses, while a rejected one is halved
	limit    int      // plan[0]: resources in the next response; 0: no limit
	rejected map[string]string
	carry    []string // sentPrefix keys of responses this request does not answer
	// pred: the response queued before this watch, whose state it starts
	// from (see Cache.cancel); its record joins this watch's state.
	pred *deltaResponse

	seq  nameSeq // the names to look at
	full bool    // look at everything of interest instead
}

// readDeltaState reads a delta client's state for a new watch and decides
// the names to look at: those changed since the client's generation, of
// the rest, of a rejected response, or subscribed or unsubscribed by this
// request. It looks at everything of interest when the state is explicit
// (a new stream), the client subscribed to the wildcard, or the
// generation is older than the change log. A wildcard client older than
// the change log is reset (the error ends the stream; it reconnects with
// its versions): the names deleted in the forgotten generations are not
// known any more.
func (c *Cache) readDeltaState(w *watch) error {
	ts, ds := w.ts, &w.ds
	w.known = w.sub.ReturnedResources()
	heldBack := c.takeQueued(w)
	known := w.known
	g, ok := known[genKey]
	if !ok {
		// Explicit: a new stream or type. Keys a client may have sent
		// in initial_resource_versions that read as state are dropped.
		for k := range known {
			if isStateKey(k) {
				w.known = maps.Clone(known)
				maps.DeleteFunc(w.known, func(k, _ string) bool { return isStateKey(k) })
				break
			}
		}
		ds.full = true
		return nil
	}
	g, wasWild := strings.CutSuffix(g, wildMark)
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil || gen > ts.gen {
		ds.full = true
		return nil
	}
	ds.complete, ds.gen = true, gen
	// A wildcard subscribed since G widens the interest; one unsubscribed
	// narrows it (the client drops what it no longer wants), and a "*"
	// that changes nothing (legacy wildcard) is no change.
	ds.wildOn = !wasWild && w.sub.IsWildcard()
	// A change of the wildcard is answered, even with nothing, so that
	// the state records it: a client that drops the wildcard drops what it
	// held through it, and must get it all again if it takes it back.
	ds.wildChanged = wasWild != w.sub.IsWildcard()
	ds.plan = parsePlan(known[limitKey])
	if r := known[rejectedKey]; r != "" {
		ds.rejected = map[string]string{}
		pairs(r, func(n, v string) { ds.rejected[n] = v })
	}
	nacked, isolated := ds.answered(ts, known, w.dreq.GetResponseNonce(), w.dreq.GetErrorDetail() != nil)
	subs, unsubs := w.dreq.GetResourceNamesSubscribe(), w.dreq.GetResourceNamesUnsubscribe()
	if gen < ts.floor {
		if w.sub.IsWildcard() {
			return fmt.Errorf("xds cache: %s state of generation %d is older than the change log (from %d); reconnect", ts.url, gen, ts.floor)
		}
		ds.stale = true
	}
	if len(subs) > 0 {
		ds.newSub = make(map[string]struct{}, len(subs))
		for _, n := range subs {
			ds.newSub[n] = struct{}{}
		}
	}
	nacked = append(nacked, heldBack...)
	// A request whose answer changes the state (what a rejection brings
	// back, a resource found bad) is answered even with nothing to send,
	// so that the state is installed.
	ds.changed = len(nacked) > len(heldBack) || isolated != ""
	quiet := len(nacked) == 0 && isolated == "" && !ds.wildOn && !ds.stale && len(subs) == 0 && len(unsubs) == 0
	ds.lookAt(ts, known[restKey], nacked, isolated, quiet, subs, unsubs)
	return nil
}

// takeQueued makes w, a delta watch, start from the state of its
// stream's response of its type that is queued but not installed, if
// any, and returns what the watch it replaced held back.
func (c *Cache) takeQueued(w *watch) (heldBack []string) {
	st, ts, ds := w.stream, w.ts, &w.ds
	if st == nil {
		return nil
	}
	if p := st.inflight[ts.url]; p != nil {
		// The previous watch's response is queued but not installed
		// (contract 6): it will be, before this watch's response. A
		// copy: the server adds the response's record to its map when
		// it installs it, while this watch may be read by a commit;
		// and the request's unsubscriptions, which the server applied
		// to the state it had, apply to this one.
		//
		// The server marks an unsubscribed name to be answered again
		// (version "") only if it was subscribed by name under a
		// wildcard (Subscription.UpdateResourceSubscriptions); the
		// mark is in the map it handed this watch, and is carried
		// over as is. A name held through the wildcard only (a
		// phantom unsubscription, which the protocol says the server
		// "can simply ignore") is not marked: marking it resent it
		// at the version held, and reported a name that does not
		// exist removed.
		delete(st.inflight, ts.url)
		marked := w.known
		w.known, ds.pred = maps.Clone(p.NextVersionMap), p
		for _, n := range w.dreq.GetResourceNamesUnsubscribe() {
			if v, ok := marked[n]; ok && v == "" {
				w.known[n] = ""
			} else {
				delete(w.known, n)
			}
		}
	}
	heldBack = st.held[ts.url]
	delete(st.held, ts.url)
	return heldBack
}

// answered reads the responses a request answers: those it does not
// (sent after the one it answers) are carried over; an accepted one
// advances the plan; a rejected one gives back the names it carried
// (nacked), and the resource rejected alone, if it was (isolated).
func (ds *deltaState) answered(ts *typeState, known map[string]string, nonce string, nack bool) (nacked []string, isolated string) {
	for k, v := range known {
		sentNonce, ok := strings.CutPrefix(k, sentPrefix)
		switch {
		case !ok:
		case nonce == "" || nonceBefore(nonce, sentNonce):
			ds.carry = append(ds.carry, k)
		case sentNonce == nonce && nack:
			nacked, isolated = ds.rejectResponse(ts, v)
		case sentNonce == nonce:
			ds.accepted(v)
		}
	}
	if len(ds.plan) > 0 {
		ds.limit = ds.plan[0]
	}
	return nacked, isolated
}

// lookAt decides the names a compact state's watch looks at: those
// changed since the client's generation, of the rest, of a rejected
// response, or subscribed or unsubscribed by this request; everything of
// interest (full) for a client that subscribed to the wildcard or whose
// generation is older than the change log.
func (ds *deltaState) lookAt(ts *typeState, rest string, nacked []string, isolated string, quiet bool, subs, unsubs []string) {
	var since []string
	if quiet {
		if since = ts.sinceLog(ds.gen); len(since) == 0 {
			// The ACK of one part of a split response: the rest, as kept
			// (not copied: a new Envoy goes through ~20 of them).
			ds.allRest, ds.seq = true, nameSeq{joined: rest}
			return
		}
	}
	if rest != "" {
		ds.rest = strings.Split(rest, sep)
	}
	if len(nacked) > 0 {
		ds.rest = append(ds.rest, nacked...)
		slices.Sort(ds.rest)
		ds.rest = slices.Compact(ds.rest)
	}
	if isolated != "" {
		// Also out of the rest, where an earlier rejection put it.
		ds.rest = slices.DeleteFunc(ds.rest, func(n string) bool { return n == isolated })
	}
	if ds.wildOn || ds.stale {
		ds.full = true
		return
	}
	if !quiet {
		since = ts.sinceLog(ds.gen)
	}
	names := append(since, ds.rest...)
	names = append(names, subs...)
	names = append(names, unsubs...)
	slices.Sort(names)
	ds.seq = nameSeq{list: slices.Compact(names)}
}

// rejectResponse takes what a rejected response carried back from the
// client's state: its names are sent again, in responses of at most half
// its resources; a resource rejected alone is remembered, at the version it
// was sent at if that is still the current one (a newer one is sent as
// usual).
func (ds *deltaState) rejectResponse(ts *typeState, sent string) (names []string, isolated string) {
	g, sent, _ := strings.Cut(sent, sep)
	k, sent, _ := strings.Cut(sent, sep)
	gen, _ := strconv.ParseUint(g, 10, 64)
	count, _ := strconv.Atoi(k)
	names = strings.Split(sent, sep)
	switch {
	case count == 1:
		if e, ok := ts.resources[names[0]]; ok && e.gen <= gen {
			if ds.rejected == nil {
				ds.rejected = map[string]string{}
			}
			ds.rejected[e.name] = e.version
			names, isolated = names[1:], e.name // not to be sent again
		}
		ds.plan.took(1)
	case count > 1:
		// The two halves, then what the plan had after the rejected part.
		ds.plan.took(count)
		ds.plan = append(plan{(count + 1) / 2, count / 2}, ds.plan...)
	}
	return names, isolated
}

// accepted notes the ACK of a response: its resources are done with.
func (ds *deltaState) accepted(sent string) {
	if len(ds.plan) == 0 {
		return
	}
	_, sent, _ = strings.Cut(sent, sep)
	k, _, _ := strings.Cut(sent, sep)
	count, _ := strconv.Atoi(k)
	ds.plan.took(count)
}

// plan is the sizes of the next responses while a rejected response is
// halved: the halves of each rejected part, in order.
type plan []int

// took takes n resources off the plan.
func (p *plan) took(n int) {
	for n > 0 && len(*p) > 0 {
		m := min(n, (*p)[0])
		n -= m
		if (*p)[0] -= m; (*p)[0] == 0 {
			*p = (*p)[1:]
		}
	}
}

func parsePlan(s string) plan {
	var p plan
	for s != "" {
		var f string
		f, s, _ = strings.Cut(s, ",")
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			p = append(p, n)
		}
	}
	return p
}

func (p plan) String() string {
	var b strings.Builder
	for i, n := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}
