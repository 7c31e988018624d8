package xds

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// Delta client state. What a delta client holds of a type is a deltaHeld,
// installed by the stream handler when it sends the response that
// computed it, and handed to the next watch. It is compact: the client
// holds, of every resource it was interested in at generation gen, the
// version current at gen (and knows that the others do not exist), except
// the names of the rest. Keeping gen instead of 5,000 name → version
// entries per Envoy is what keeps a fleet of Envoys subscribed to every
// assignment within memory; the versions at gen are recovered from each
// resource's commit generation (entry.gen) and the deletion generations
// (deletedAt). Explicit versions are a reconnecting client's
// initial_resource_versions, before its first response, and names an
// unsubscription marks to be answered again.
//
// The state also records what each response not yet answered carried
// (inflight). A response counts as held once it is sent, and stops
// counting if the client rejects it (NACK): what it carried, but what a
// response sent after it carries again (whose answer tells), joins the
// rest, to be sent again in two halves (plan: the sizes of the next
// responses), a rejected half halved again, until the resource the client
// refuses is alone: log2(n)+1 rejections for one bad resource among n, and
// the search goes on where it was for the next one. That resource, at that
// version, is then remembered (rejected) and not sent again; a bad
// resource costs only itself, and a new version of it is sent as usual.
// Everything lives in the stream's own value, so it goes with the stream.

// deltaHeld is what a delta client holds of one type. The stream handler
// (deltaserver.go) owns it, under the stream's lock: it keeps the one
// its type's last response installed (deltaSub.held) and hands it to each
// watch. The cache reads it under its lock and never changes it; the
// handler changes it only by installing it (deltaResponse.install, which
// adds the response's record, then dropAnswered, before any watch reads
// it) and by marking versions on an unsubscription, between a watch's
// cancellation and the next watch. The slices and maps of a compact state
// are never written once installed: a reader copies what it changes.
type deltaHeld struct {
	// compact: a response installed the state, at generation gen; wild:
	// the client was subscribed to the wildcard at gen.
	compact, wild bool
	gen           uint64
	// versions: explicit name → version ("": answer it again, sent or
	// reported removed); resumed: more of them, a resume's versions that
	// were current when decoded (resumed.go), never a name of versions.
	// Read through version.
	versions map[string]string
	resumed  *resumedVersions
	// rest: sorted names the client may hold older versions of (the rest
	// of a split response, the content of a rejected response), which the
	// next responses check and send. A suffix of a type's sorted names is
	// shared with it (store/sortednames.go).
	rest []string
	// plan: the sizes of the next responses while a rejected response is
	// halved to find the resource the client refuses.
	plan plan
	// rejected: name → version of the resources the client rejected alone,
	// which are not sent again at that version.
	rejected map[string]string
	// inflight: what the responses sent and not answered yet carried.
	inflight []*deltaSent
}

// deltaSent is what one delta response carried, kept until the client
// answers it, so that a NACK puts it back to be sent again (but what a
// response sent after it carries again: rejectResponse).
type deltaSent struct {
	nonce   string // set by the stream handler when it sends the response
	changed []string
	removed []string
	// version: of a response of one resource, the version it carried;
	// the one a NACK of it remembers as rejected.
	version string
}

// deltaResponse is a delta response and the state it installs once the
// stream handler sends it (install).
type deltaResponse struct {
	req  *discovery.DeltaDiscoveryRequest
	resp *discovery.DeltaDiscoveryResponse
	// wire: resp's resources' encodings (wiredDelta); nil: resp is
	// encoded from its messages.
	wire [][]byte
	// msg: the response a watch computed, which resp points to (one
	// allocation for both; responses made elsewhere leave it empty).
	msg discovery.DeltaDiscoveryResponse
	// out: resp as the stream handler sends it (deltaStream.send), in the
	// same allocation; empty once sent. res, wires: room for the resources
	// and encodings of a response of one resource.
	out   wiredDelta
	res   [1]*discovery.Resource
	wires [1][]byte
	room  encodedRoom // out's encoding as gRPC reads it (encodedRoom)
	w     *watch
	next  *deltaHeld
	sent  *deltaSent // nil: the response carried nothing
	// pred: a response queued before this one whose state this one was
	// computed from before the server installed it (see Cache.cancel); its
	// record is complete once it is installed.
	pred *deltaResponse
	// sentOut: the stream handler gave the response its nonce (resp.Nonce,
	// not written again) and sends it, before the client can answer it;
	// the sync status reads it under the cache's lock (syncRec.settle),
	// which the send does not take.
	sentOut atomic.Bool
}

// install is called by the stream handler, under the stream's lock, when
// it has given the response its nonce and sent it, after the responses
// queued before (pred among them) were installed, as is the watch's cancel
// function. It returns the state the stream now holds.
func (r *deltaResponse) install(nonce string) *deltaHeld {
	r.w.installed = true
	if r.sent != nil {
		r.sent.nonce = nonce
		r.next.inflight = append(r.next.inflight, r.sent)
	}
	if p := r.pred; p != nil {
		// What pred's state recorded once installed (its own record, and
		// those it took over). One the client has answered since is
		// dropped at its next answer.
		r.next.inflight = appendNew(r.next.inflight, p.next.inflight)
		r.pred = nil
	}
	return r.next
}

// appendNew appends to list the records of more not in it. The lists can
// hold max_unanswered_responses records plus one per name subscribed, so
// past a few the records of list are looked up in a set, not by a scan
// per record of more.
func appendNew(list, more []*deltaSent) []*deltaSent {
	if len(list)*len(more) <= 1024 {
		for _, s := range more {
			if !slices.Contains(list, s) {
				list = append(list, s)
			}
		}
		return list
	}
	in := make(map[*deltaSent]struct{}, len(list)+len(more))
	for _, s := range list {
		in[s] = struct{}{}
	}
	for _, s := range more {
		if _, ok := in[s]; !ok {
			in[s] = struct{}{}
			list = append(list, s)
		}
	}
	return list
}

// nonceBefore reports whether nonce a was given before b. The stream
// handlers number responses per stream from 1.
func nonceBefore(a, b string) bool {
	x, errx := strconv.ParseUint(a, 10, 64)
	y, erry := strconv.ParseUint(b, 10, 64)
	return errx == nil && erry == nil && x < y
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
	// newSub: names the request subscribes to, sorted (a copy: one slice,
	// not a map, for a request of thousands). The client may hold them or
	// not; the protocol asks to send them (or report them removed) either way.
	newSub []string
	// unsub: names the request unsubscribes from, sorted (a copy): looked
	// at, not sent for that (deltaPass.collect).
	unsub    []string
	rest     []string // sorted: names the client may hold older versions of
	allRest  bool     // every name looked at is of the rest (the ACK of a part)
	plan     plan     // sizes of the next responses, while a rejected one is halved
	limit    int      // plan[0]: resources in the next response; 0: no limit
	rejected map[string]string
	carry    []*deltaSent // responses this request does not answer
	// carried: of a client that subscribed to the wildcard since gen
	// (wildOn), what the responses it had not answered when it sent the
	// request (carriedNames) did last with each name: sent it (true) or
	// reported it removed. The client keeps what they send, subscribed
	// by name or not, if they arrive after the request: a name it
	// unsubscribed while such a response was on its way is of interest
	// again when it arrives.
	carried map[string]bool
	// pred: the response queued before this watch, whose state it starts
	// from (see Cache.cancel); its record joins this watch's state.
	pred *deltaResponse

	// seq: sorted, the names to look at besides rest, which the pass
	// walks with them in order (allRest: the rest as kept, and rest is
	// empty).
	seq  []string
	full bool // look at everything of interest instead
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
	heldBack := c.takeQueued(w)
	known := w.known
	if !known.compact || known.gen > ts.Gen {
		// Explicit: a new stream or type.
		ds.full = true
		return nil
	}
	gen, wasWild := known.gen, known.wild
	ds.complete, ds.gen = true, gen
	// A wildcard subscribed since G widens the interest; one unsubscribed
	// narrows it (the client drops what it no longer wants), and a "*"
	// that changes nothing (legacy wildcard) is no change.
	ds.wildOn = !wasWild && w.sub.IsWildcard()
	// A change of the wildcard is answered, even with nothing, so that
	// the state records it: a client that drops the wildcard drops what it
	// held through it, and must get it all again if it takes it back.
	ds.wildChanged = wasWild != w.sub.IsWildcard()
	ds.plan = slices.Clone(known.plan)
	ds.rejected = maps.Clone(known.rejected)
	nacked, isolated := ds.answered(ts, known.inflight, w.dreq.GetResponseNonce(), w.dreq.GetErrorDetail() != nil)
	subs, unsubs := w.dreq.GetResourceNamesSubscribe(), w.dreq.GetResourceNamesUnsubscribe()
	if gen < ts.Floor {
		if w.sub.IsWildcard() {
			return fmt.Errorf("xds cache: %s state of generation %d is older than the change log (from %d); reconnect", ts.URL, gen, ts.Floor)
		}
		ds.stale = true
	}
	if len(subs) > 0 {
		ds.newSub = slices.Clone(subs)
		slices.Sort(ds.newSub)
		ds.newSub = slices.Compact(ds.newSub)
	}
	if len(unsubs) > 0 {
		ds.unsub = slices.Sorted(slices.Values(unsubs))
	}
	if ds.wildOn {
		ds.carried = ds.carriedNames(known.inflight, w.dsub.answered)
	}
	nacked = append(nacked, heldBack...)
	// A request whose answer changes the state (what a rejection brings
	// back, a resource found bad) is answered even with nothing to send,
	// so that the state is installed.
	ds.changed = len(nacked) > len(heldBack) || isolated != ""
	quiet := len(nacked) == 0 && isolated == "" && !ds.wildOn && !ds.stale && len(subs) == 0 && len(unsubs) == 0
	ds.lookAt(ts, known.rest, nacked, isolated, quiet, ds.newSub, unsubs)
	return nil
}

// carriedNames returns what the responses the client had not answered
// when it sent the request did last with each name (true: sent it; false:
// reported it removed): those of inflight sent after the last one it
// answered (answered), in the order they were sent, then the response
// queued before the request's watch (pred), whose record is added when it
// is installed.
func (ds *deltaState) carriedNames(inflight []*deltaSent, answered string) map[string]bool {
	var sent []*deltaSent
	for _, s := range inflight {
		if answered == "" || nonceBefore(answered, s.nonce) {
			sent = append(sent, s)
		}
	}
	slices.SortFunc(sent, func(a, b *deltaSent) int {
		switch {
		case nonceBefore(a.nonce, b.nonce):
			return -1
		case nonceBefore(b.nonce, a.nonce):
			return 1
		}
		return 0
	})
	if p := ds.pred; p != nil && p.sent != nil && !slices.Contains(sent, p.sent) {
		sent = append(sent, p.sent)
	}
	if len(sent) == 0 {
		return nil
	}
	carried := map[string]bool{}
	for _, s := range sent {
		for _, n := range s.changed {
			carried[n] = true
		}
		for _, n := range s.removed {
			carried[n] = false
		}
	}
	return carried
}

// subscribes reports whether the request subscribes to n.
func (ds *deltaState) subscribes(n string) bool {
	_, ok := slices.BinarySearch(ds.newSub, n)
	return ok
}

// takeQueued makes w, a delta watch, start from the state of its
// stream's response of its type that is queued but not installed, if
// any, and returns what the watch it replaced held back.
func (c *Cache) takeQueued(w *watch) (heldBack []string) {
	t, ds := w.st, &w.ds
	if t == nil {
		return nil
	}
	if p := t.inflight; p != nil {
		// The previous watch's response is queued but not installed: it
		// will be, before this watch's response. A copy: the server adds
		// the response's record when it installs it, while this watch may
		// be read by a commit; and the request's unsubscriptions, which
		// the server applied to the state it had, apply to this one.
		//
		// The server marks an unsubscribed name to be answered again
		// (version "") only if it was subscribed by name under a
		// wildcard (deltaSub.update); the mark is in the state it handed
		// this watch, and is carried over as is. A name held through the
		// wildcard only (a phantom unsubscription, which the protocol
		// says the server "can simply ignore") is not marked: marking it
		// resent it at the version held, and reported a name that does
		// not exist removed.
		t.inflight = nil
		marked := w.known.versions
		next := *p.next
		next.versions = maps.Clone(next.versions)
		next.inflight = slices.Clone(next.inflight)
		for _, n := range w.dreq.GetResourceNamesUnsubscribe() {
			if v, ok := marked[n]; ok && v == "" {
				if next.versions == nil {
					next.versions = map[string]string{}
				}
				next.versions[n] = ""
			} else {
				delete(next.versions, n)
			}
		}
		w.known, ds.pred = &next, p
	}
	heldBack, t.held = t.held, nil
	return heldBack
}

// answered reads the responses a request answers: those it does not
// (sent after the one it answers) are carried over; an accepted one
// advances the plan; a rejected one gives back the names it carried
// (nacked) but those a response sent after it carries again, and the
// resource rejected alone, if it was (isolated).
func (ds *deltaState) answered(ts *typeState, inflight []*deltaSent, nonce string, nack bool) (nacked []string, isolated string) {
	var rejected *deltaSent
	for _, s := range inflight {
		// The response answered first: the ACK of the newest response
		// compares no numbers.
		switch {
		case s.nonce == nonce && nonce != "" && nack:
			rejected = s
		case s.nonce == nonce && nonce != "":
			ds.plan.took(len(s.changed))
		case nonce == "" || nonceBefore(nonce, s.nonce):
			ds.carry = append(ds.carry, s)
		}
	}
	if rejected != nil {
		nacked, isolated = ds.rejectResponse(ts, rejected)
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
// generation is older than the change log. subs are sorted, each once
// (newSub), and not written.
func (ds *deltaState) lookAt(ts *typeState, rest []string, nacked []string, isolated string, quiet bool, subs, unsubs []string) {
	var since []string
	if quiet {
		if since = ts.SortedSince(ds.gen); len(since) == 0 {
			// The ACK of one part of a split response: the rest, as kept
			// (not copied: a new Envoy goes through ~20 of them).
			ds.allRest, ds.seq = true, rest
			return
		}
	}
	// The rest as kept (a run of the type's names, or a state's own
	// copy), never written: a new slice where it changes. A client that
	// subscribes while its sync is still in parts has a rest of up to the
	// whole type, and an Envoy subscribes to its assignments a CDS part at
	// a time: a copy or a sort of the rest per request would make its
	// sync grow as the square of the catalog.
	ds.rest = rest
	if len(nacked) > 0 {
		ds.rest = mergeNames(rest, sortedNames(nacked))
	}
	if isolated != "" && slices.Contains(ds.rest, isolated) {
		// Also out of the rest, where an earlier rejection put it.
		ds.rest = slices.DeleteFunc(slices.Clone(ds.rest), func(n string) bool { return n == isolated })
	}
	if ds.wildOn || ds.stale {
		ds.full = true
		return
	}
	if !quiet {
		since = ts.SortedSince(ds.gen)
	}
	// The names besides the rest, sorted (since is), merged: linear in
	// the request and the changes. The pass walks them and the rest
	// together, in order (deltaPass.collect), as far as the response goes.
	ds.seq = mergeNames(since, mergeNames(subs, sortedNames(unsubs)))
}

// sortedNames returns names sorted, each once: names if they are, else a
// sorted copy (names are not written).
func sortedNames(names []string) []string {
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			return slices.Compact(slices.Sorted(slices.Values(names)))
		}
	}
	return names
}

// mergeNames returns the names of a and b, sorted lists of distinct
// names, sorted, each once: a or b itself if the other is empty (neither
// is written), else a new slice. Each name of the shorter list is found
// in the longer one by a search from where the last one was (a rest of
// thousands of names and a request's hundred cost a few comparisons per
// name of the request), and the names between are copied.
func mergeNames(a, b []string) []string {
	switch {
	case len(b) == 0:
		return a
	case len(a) == 0:
		return b
	case len(a) < len(b):
		a, b = b, a
	}
	out := make([]string, 0, len(a)+len(b))
	i := 0
	for _, n := range b {
		j, found := store.SearchFrom(a, i, n)
		out = append(out, a[i:j]...)
		out = append(out, n)
		if found {
			j++
		}
		i = j
	}
	return append(out, a[i:]...)
}

// rejectResponse takes what a rejected response carried back from the
// client's state: its names are sent again, in responses of at most half
// its resources; a resource rejected alone is remembered, at the version it
// was sent at if that is still the current one (a newer one is sent as
// usual). The version is compared, not the generation: a resource that
// changed and came back to the version sent since (an assignment whose
// cluster went A → B → A is re-versioned back to the same version) is the
// same content, which the client rejects again.
//
// A name that a response sent after the rejected one carries again (sent
// or reported removed: ds.carry, and ds.pred, queued) is not given back:
// the state installed since counts that response held, and its own
// answer tells whether the client took it. Given back, the name would go
// out again while that response is on its way, and a client answering in
// order rejects a bad resource once per response that carries it: two
// pipelined rejections of it would each halve their way to it.
func (ds *deltaState) rejectResponse(ts *typeState, sent *deltaSent) (names []string, isolated string) {
	names = slices.Concat(sent.changed, sent.removed)
	switch count := len(sent.changed); {
	case count == 1:
		if e, ok := ts.Resources[names[0]]; ok && e.Version == sent.version {
			if ds.rejected == nil {
				ds.rejected = map[string]string{}
			}
			ds.rejected[e.Name] = e.Version
			names, isolated = names[1:], e.Name // not to be sent again
		}
		ds.plan.took(1)
	case count > 1:
		// The two halves, then what the plan had after the rejected part.
		ds.plan.took(count)
		ds.plan = append(plan{(count + 1) / 2, count / 2}, ds.plan...)
	}
	return ds.notCarriedAgain(names), isolated
}

// notCarriedAgain returns names but those a response sent after the
// rejected one carries (ds.carry, ds.pred): names itself if there are
// none, else a new slice.
func (ds *deltaState) notCarriedAgain(names []string) []string {
	later := ds.carry
	if p := ds.pred; p != nil && p.sent != nil {
		later = append(slices.Clip(later), p.sent)
	}
	if len(later) == 0 || len(names) == 0 {
		return names
	}
	again := map[string]struct{}{}
	for _, s := range later {
		for _, n := range s.changed {
			again[n] = struct{}{}
		}
		for _, n := range s.removed {
			again[n] = struct{}{}
		}
	}
	if !slices.ContainsFunc(names, func(n string) bool { _, ok := again[n]; return ok }) {
		return names
	}
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { _, ok := again[n]; return ok })
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
