package xds_test

// The model's clients: what each client holds per the xDS protocol, the
// requests it sends (on the generated stubs), and the checks made on every
// response as it arrives.

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
)

// interest is a subscription as the protocol defines it (and
// go-control-plane implements it), legacy wildcard included: a first
// request naming nothing is a wildcard subscription until a request names
// something; then only an explicit "*" is.
type interest struct {
	legacy, wild bool
	names        map[string]bool
}

func (in *interest) has(n string) bool { return in.wild || in.names[n] }

func (in *interest) clone() interest {
	return interest{legacy: in.legacy, wild: in.wild, names: maps.Clone(in.names)}
}

func (in *interest) deltaFirst(subs []string) {
	*in = interest{legacy: true, wild: len(subs) == 0, names: map[string]bool{}}
	in.deltaUpdate(subs, nil)
}

func (in *interest) deltaUpdate(subs, unsubs []string) (again []string) {
	if in.legacy {
		if len(subs) == 0 {
			return nil // unsubscriptions are ignored in legacy mode
		}
		in.legacy = false
	}
	return in.apply(subs, unsubs)
}

// apply subscribes and unsubscribes names, one after the other as
// go-control-plane's UpdateResourceSubscriptions applies a delta request:
// the subscriptions, then the unsubscriptions; unsubscribing "*" does not
// end a legacy wildcard. It returns the names unsubscribed while
// subscribed by name under the wildcard (as of that name's place in the
// list), which a delta server must answer again (tstate.reanswer).
func (in *interest) apply(subs, unsubs []string) (again []string) {
	for _, n := range subs {
		if n == "*" {
			in.wild = true
		} else {
			in.names[n] = true
		}
	}
	for _, n := range unsubs {
		if n != "*" {
			if in.wild && in.names[n] {
				again = append(again, n)
			}
			delete(in.names, n)
		} else if !in.legacy {
			in.wild = false
		}
	}
	return again
}

func (in *interest) sotwFirst(list []string) {
	*in = interest{legacy: true, wild: len(list) == 0, names: map[string]bool{}}
	in.sotwSet(list)
}

func (in *interest) sotwSet(list []string) {
	if in.legacy {
		if len(list) == 0 {
			return
		}
		in.legacy = false
	}
	in.wild, in.names = false, map[string]bool{}
	for _, n := range list {
		if n == "*" {
			in.wild = true
		} else {
			in.names[n] = true
		}
	}
}

// sotwList is the resource_names a sotw client sends for the interest.
func (in *interest) sotwList() []string {
	if in.legacy && in.wild {
		return nil
	}
	l := slices.Sorted(maps.Keys(in.names))
	if in.wild {
		l = append([]string{"*"}, l...)
	}
	return l
}

func (in *interest) String() string {
	s := strings.Join(slices.Sorted(maps.Keys(in.names)), " ")
	switch {
	case in.legacy && in.wild:
		return "*(legacy)"
	case in.wild && s != "":
		return "* " + s
	case in.wild:
		return "*"
	}
	return "[" + s + "]"
}

type heldRes struct {
	version, content string
	// seq: for sotw, the publish at the start of the window in which it was
	// received (its response was computed at or after it).
	seq int
}

type nackCount struct{ n, maxSize, changed int }

// tstate is a client's state for one type.
type tstate struct {
	typ      string
	onStream bool // a request of this type was sent on the current stream
	in       interest
	held     map[string]heldRes
	nonce    string // last response processed
	version  string // sotw: version_info last accepted
	first    bool   // sotw: no response processed yet on this stream

	// Since the last quiescence.
	stable     interest        // the interest at the last quiescence
	winWild    bool            // wildcard at some point
	winNames   map[string]bool // names subscribed at some point
	resendOK   map[string]bool // names the server may resend at a held version
	resendAll  bool
	subChanged bool // sotw: resource_names changed
	afterNack  bool
	// starChanged: "*" was subscribed or unsubscribed (classifies failures)
	starChanged bool
	owed        map[string]bool    // held names re-subscribed, not yet answered (delta)
	dropped     map[string]heldRes // sotw: unsubscribed in the window, as held

	budget map[string]int // removals the client may be told of, per name (delta)
	// heardWin: the publish count at the start of the window in which the
	// client last received a name or was told it is removed (the response
	// was computed at or after it; the model cannot tell when: a response
	// may wait in the stream while publishes go on). The compact state
	// cannot tell whether a delta client that is behind holds a name that
	// changed since: a name that changed after the response it last heard
	// of it was computed may be resent at the version held (it went away
	// and came back the same), or reported removed though not held (it
	// came and went). Nothing else may be. (The server knows what the
	// client holds as of the response, not as of its arrival: a change
	// between the two is "after" for it.)
	heardWin map[string]int
	nacks    map[string]*nackCount // NACKs of a poison version since (re)subscribing it
	nacked   map[string]bool       // poison versions rejected, ever
	// answers: per name, subscriptions of it (delta) not yet answered: the
	// server must send it in answer to each, though it was rejected
	// ("the server must still provide those resources in the response"),
	// so a rejection of it there is no NACK loop. A response carrying
	// the name or its removal takes one.
	answers map[string]int
	// hiddenOK: per name the client may not see, how often it may be
	// told that it does not exist (once per request naming it).
	hiddenOK map[string]int
	// hiddenOwed: names the client may not see, subscribed and not told
	// since that they do not exist. One answer is owed however many
	// requests named the name: a response computed after the last of
	// them answers them all (the model cannot tell when a response was
	// computed, so any later removal of the name counts).
	hiddenOwed map[string]bool
	// left: names that left the interest in the window (unsubscribed,
	// or dropped with the wildcard), though they may be of interest
	// again at both ends of it.
	left map[string]bool
	// unwild: when the wildcard left the interest in the window, the
	// names subscribed by name then; every other name left it too, held
	// or not (one published while the wildcard was off was not wanted).
	unwild map[string]bool
	// reanswer (delta): names unsubscribed by name under a wildcard,
	// still of interest, which the server has not answered since. The
	// client lets such a name go (it no longer holds it), and the server
	// must answer it: send it whole, or report it removed. The rule is
	// go-control-plane v0.14.0's, which it gives as the xDS protocol's
	// (pkg/server/stream/v3/subscription.go, UpdateResourceSubscriptions,
	// whose state xds/deltaserver.go keeps): "if a watch is currently
	// wildcard [and] a resource is explicitly unsubscribed by name[, t]hen
	// the control-plane must return in the response whether the resource
	// is removed (if no longer present for this node) or still existing.
	// In the latter case the entire resource must be returned, same as if
	// it had been created or updated." It is decided name by name in
	// request order (subscriptions first): a name subscribed by name when
	// its unsubscription is applied, with the wildcard held then; a
	// repeat of the name in the same list does not undo it. (The xDS
	// protocol's section on unsubscribing says only that phantom
	// unsubscriptions may be ignored; its section on subscribing, that a
	// name subscribed again must be sent again as "the client may have
	// 'forgotten' those resources": a name is forgotten the same way
	// here.) At quiescence the client holds it again if it is served
	// (checkHeld's missing), and any left must have been answered.
	reanswer map[string]bool
}

func newTstate(typ string) *tstate {
	return &tstate{typ: typ, held: map[string]heldRes{}, in: interest{names: map[string]bool{}},
		stable: interest{names: map[string]bool{}}, winNames: map[string]bool{}, resendOK: map[string]bool{},
		owed: map[string]bool{}, dropped: map[string]heldRes{}, budget: map[string]int{}, nacks: map[string]*nackCount{}, nacked: map[string]bool{}, answers: map[string]int{}, heardWin: map[string]int{}, hiddenOK: map[string]int{}, hiddenOwed: map[string]bool{}, left: map[string]bool{}, reanswer: map[string]bool{}}
}

// context qualifies a failure's kind by what happened in the window.
func (ts *tstate) context() string {
	s := ""
	if ts.starChanged {
		s += "-after-star-change"
	}
	if ts.afterNack {
		s += "-after-nack"
	}
	return s
}

// interestChanged records the window and drops what the client is no
// longer interested in.
func (ts *tstate) interestChanged() {
	if ts.winWild && !ts.in.wild && ts.unwild == nil {
		ts.unwild = maps.Clone(ts.in.names)
	}
	ts.winWild = ts.winWild || ts.in.wild
	for n := range ts.in.names {
		ts.winNames[n] = true
	}
	for n := range ts.winNames {
		if !ts.in.has(n) {
			ts.left[n] = true
		}
	}
	for n := range ts.held {
		if !ts.in.has(n) {
			delete(ts.held, n)
			ts.left[n] = true
		}
	}
	for n := range ts.reanswer {
		if !ts.in.has(n) {
			delete(ts.reanswer, n) // no longer wanted: nothing owed
		}
	}
}

func (ts *tstate) inWindow(n string) bool { return ts.winWild || ts.winNames[n] || ts.in.has(n) }

func (ts *tstate) resubscribed(n string) {
	ts.resendOK[n] = true
	ts.budget[n]++
	for k := range ts.nacks {
		if strings.HasPrefix(k, n+"@") {
			delete(ts.nacks, k)
		}
	}
}

func (ts *tstate) resubscribedAll() {
	ts.resendAll = true
	clear(ts.nacks)
}

// quiesced starts a new window.
func (ts *tstate) quiesced() {
	ts.stable = ts.in.clone()
	ts.winWild, ts.winNames = ts.in.wild, maps.Clone(ts.in.names)
	clear(ts.resendOK)
	ts.resendAll, ts.subChanged, ts.afterNack, ts.starChanged = false, false, false, false
	clear(ts.owed)
	clear(ts.hiddenOK)
	clear(ts.hiddenOwed)
	clear(ts.dropped)
	clear(ts.left)
	ts.unwild = nil
	clear(ts.reanswer) // checked (checkHeld), but for names the client may not see
	for n, b := range ts.budget {
		_, held := ts.held[n]
		if held || (ts.in.has(n) && b >= 1) {
			ts.budget[n] = 1
		} else {
			delete(ts.budget, n)
		}
	}
	for n := range ts.held {
		ts.budget[n] = 1
	}
}

// mclient is one ADS client (one stream at a time).
type mclient struct {
	id     int
	delta  bool
	vis    int // visibility class (model_vis_test.go)
	gen    int // stream generation; events of older streams are dropped
	cancel context.CancelFunc
	done   chan struct{}
	dsend  func(*discovery.DeltaDiscoveryRequest) error
	ssend  func(*discovery.DiscoveryRequest) error
	types  map[string]*tstate

	// Barrier (see mrun.quiesce): LDS requests toggling between two
	// listeners, each answered with one response.
	bcur             int
	bnonce, bversion string
	bpending         int
	processed, mark  int // responses of CDS/EDS processed
}

func (c *mclient) String() string {
	if c.delta {
		return fmt.Sprintf("c%d(delta)", c.id)
	}
	return fmt.Sprintf("c%d(sotw)", c.id)
}

var barrierNames = [2]string{"barrier-0", "barrier-1"}

// violation is a broken invariant.
type violation struct {
	kind string // class, for grouping distinct failures
	msg  string
}

func (r *mrun) fail(kind string, c *mclient, ts *tstate, format string, args ...any) *violation {
	k, who := kind, ""
	if c != nil {
		p := "sotw"
		if c.delta {
			p = "delta"
		}
		k += "/" + p
		who = c.String() + " "
	}
	if ts != nil {
		k += "/" + typeName(ts.typ)
		who += typeName(ts.typ) + " "
	}
	return &violation{kind: k, msg: who + fmt.Sprintf(format, args...)}
}

func (r *mrun) logf(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf("%3d  ", r.stepNo)+fmt.Sprintf(format, args...))
}

// --- requests -----------------------------------------------------------

func (r *mrun) sendDelta(c *mclient, req *discovery.DeltaDiscoveryRequest, what string) *violation {
	if req.Node == nil {
		req.Node = &core.Node{Id: fmt.Sprintf("c%d", c.id)}
	}
	r.logf("%s → %s %s", c, typeName(req.TypeUrl), what)
	if err := c.dsend(req); err != nil {
		return r.fail("stream-error", c, nil, "send: %v", err)
	}
	return nil
}

func (r *mrun) sendSotw(c *mclient, req *discovery.DiscoveryRequest, what string) *violation {
	if req.Node == nil {
		req.Node = &core.Node{Id: fmt.Sprintf("c%d", c.id)}
	}
	r.logf("%s → %s %s names=%v v=%s nonce=%s", c, typeName(req.TypeUrl), what, req.ResourceNames, short(req.VersionInfo), req.ResponseNonce)
	if err := c.ssend(req); err != nil {
		return r.fail("stream-error", c, nil, "send: %v", err)
	}
	return nil
}

// firstRequest sends the first request of a type on a stream, from the
// client's interest (and, for delta, the versions it holds). A type with no
// interest is not requested: its first request would be a legacy wildcard.
func (r *mrun) firstRequest(c *mclient, ts *tstate, legacy bool) *violation {
	ts.onStream = false
	if !ts.in.wild && len(ts.in.names) == 0 {
		return nil
	}
	ts.onStream, ts.nonce, ts.version, ts.first = true, "", "", true
	clear(ts.answers) // of the stream before
	clear(ts.reanswer)
	if c.delta {
		subs := slices.Sorted(maps.Keys(ts.in.names))
		if ts.in.wild && !(legacy && len(subs) == 0) {
			subs = append([]string{"*"}, subs...)
		}
		initial := map[string]string{}
		for n, h := range ts.held {
			initial[n] = h.version
		}
		ts.in.deltaFirst(subs)
		for _, n := range subs {
			ts.budget[n]++
			ts.hiddenSubscribed(c, n)
		}
		ts.interestChanged()
		return r.sendDelta(c, &discovery.DeltaDiscoveryRequest{TypeUrl: ts.typ, ResourceNamesSubscribe: subs, InitialResourceVersions: initial},
			fmt.Sprintf("first sub=%v initial=%s", subs, fmtVersions(initial)))
	}
	list := ts.in.sotwList()
	if ts.in.wild && len(list) == 0 && !legacy {
		list = []string{"*"}
	}
	ts.in.sotwFirst(list)
	ts.interestChanged()
	ts.subChanged = true
	ts.resubscribedAll() // a new sotw stream gets everything again
	return r.sendSotw(c, &discovery.DiscoveryRequest{TypeUrl: ts.typ, ResourceNames: list}, "first")
}

// subscribe, unsubscribe and wildcard toggles. Each changes the interest
// right away: a response crossing the request is checked against both.
func (r *mrun) changeSub(c *mclient, ts *tstate, subs, unsubs []string) *violation {
	if !ts.onStream {
		if len(subs) == 0 {
			return nil // nothing to subscribe to: no first request
		}
		ts.in = interest{names: map[string]bool{}}
		if c.delta {
			ts.in.apply(subs, unsubs)
		} else {
			ts.in.sotwSet(subs)
			ts.in.apply(nil, unsubs)
		}
		return r.firstRequest(c, ts, false)
	}
	if slices.Contains(subs, "*") || slices.Contains(unsubs, "*") {
		ts.starChanged = true
	}
	if c.delta {
		// A name repeated in a list is named once by the request: one
		// subscription to answer, one removal the client may be told of.
		wild := ts.in.wild || slices.Contains(subs, "*")
		for _, n := range uniq(subs) {
			if n == "*" {
				ts.resubscribedAll()
				continue
			}
			if _, held := ts.held[n]; held {
				ts.owed[n] = true // the server must send it again
			}
			ts.answers[n]++
			ts.resubscribed(n)
			ts.hiddenSubscribed(c, n)
		}
		for _, n := range uniq(unsubs) {
			delete(ts.owed, n)
			if wild {
				// Unsubscribed under a wildcard: the server may say
				// again whether it exists (go-control-plane marks a
				// name subscribed by name under a wildcard, also while
				// the previous response is not installed, see
				// Cache.cancel; the model allows it for any name).
				ts.hiddenAsked(c, n)
			}
		}
		for _, n := range uniq(ts.in.deltaUpdate(subs, unsubs)) {
			// Still of interest through the wildcard: the server must
			// say again whether it exists (reanswer); the client lets
			// it go.
			ts.resendOK[n] = true
			ts.budget[n]++
			ts.reanswer[n] = true
			if _, held := ts.held[n]; held {
				delete(ts.held, n)
				ts.left[n] = true
			}
		}
		ts.interestChanged()
		return r.sendDelta(c, &discovery.DeltaDiscoveryRequest{TypeUrl: ts.typ, ResourceNamesSubscribe: subs, ResourceNamesUnsubscribe: unsubs},
			fmt.Sprintf("sub=%v unsub=%v", subs, unsubs))
	}
	// sotw: the whole list.
	next := ts.in.clone()
	if next.legacy && next.wild && len(subs) > 0 {
		next = interest{wild: true, names: map[string]bool{}} // keep the wildcard explicitly
	}
	next.apply(subs, unsubs)
	list := next.sotwList()
	if len(list) == 0 && (ts.in.legacy || ts.stable.legacy) {
		// To a server still in legacy mode, an empty list is a
		// wildcard: one that has not seen the lists since (a request
		// crossing a response is ignored for its stale nonce) would
		// read it so. Not sent: its meaning is not the client's.
		r.logf("%s → %s: no empty list while the server may be in legacy wildcard mode", c, typeName(ts.typ))
		return nil
	}
	old := ts.in.clone()
	ts.in.sotwSet(list)
	if ts.in.wild && !old.wild {
		ts.resubscribedAll()
	}
	for n := range ts.in.names {
		if !old.names[n] {
			ts.resubscribed(n)
		}
	}
	ts.subChanged = true
	for n, h := range ts.held {
		if !ts.in.has(n) {
			ts.dropped[n] = h
		}
	}
	ts.interestChanged()
	// A sotw request crossing a response is ignored (stale nonce); the
	// server learns the list from the ACK. A name dropped and wanted again
	// meanwhile may look unchanged to it: the client keeps its copy.
	for n, h := range ts.dropped {
		if ts.in.has(n) {
			if _, ok := ts.held[n]; !ok {
				ts.held[n] = h
			}
			delete(ts.dropped, n)
		}
	}
	// A name the step repeats among its subscriptions is repeated in
	// resource_names (the sotw list says the same with it once).
	for i, n := range subs {
		if slices.Contains(subs[:i], n) && slices.Contains(list, n) {
			list = append(list, n)
		}
	}
	return r.sendSotw(c, &discovery.DiscoveryRequest{TypeUrl: ts.typ, ResourceNames: list, VersionInfo: ts.version, ResponseNonce: ts.nonce}, "change")
}

func (r *mrun) sendBarrier(c *mclient, first bool) *violation {
	c.bpending++
	if c.delta {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: lds, ResourceNamesSubscribe: []string{barrierNames[0]}}
		if !first {
			req = &discovery.DeltaDiscoveryRequest{TypeUrl: lds, ResourceNamesSubscribe: []string{barrierNames[1-c.bcur]}, ResourceNamesUnsubscribe: []string{barrierNames[c.bcur]}}
			c.bcur = 1 - c.bcur
		}
		if req.Node == nil {
			req.Node = &core.Node{Id: fmt.Sprintf("c%d", c.id)}
		}
		if err := c.dsend(req); err != nil {
			return r.fail("stream-error", c, nil, "send: %v", err)
		}
		return nil
	}
	req := &discovery.DiscoveryRequest{TypeUrl: lds, ResourceNames: []string{barrierNames[0]}, Node: &core.Node{Id: fmt.Sprintf("c%d", c.id)}}
	if !first {
		c.bcur = 1 - c.bcur
		req = &discovery.DiscoveryRequest{TypeUrl: lds, ResourceNames: []string{barrierNames[c.bcur]}, VersionInfo: c.bversion, ResponseNonce: c.bnonce}
	}
	if err := c.ssend(req); err != nil {
		return r.fail("stream-error", c, nil, "send: %v", err)
	}
	return nil
}

// --- responses ----------------------------------------------------------

type item struct {
	name, version, content string
	poison                 bool
	v                      *mver // as served
}

func (it item) String() string {
	if it.version != "" {
		return it.name + "@" + short(it.version) + poisonMark(it.poison)
	}
	return it.name + "=" + short(it.content) + poisonMark(it.poison)
}

// onDelta processes a delta response: checks, then ACK (applied) or NACK
// (rejected whole: it carries a poison resource).
func (r *mrun) onDelta(c *mclient, resp *discovery.DeltaDiscoveryResponse) *violation {
	if resp.TypeUrl == lds {
		c.bpending--
		return nil
	}
	ts := c.types[resp.TypeUrl]
	if ts == nil || !ts.onStream {
		return r.fail("unsolicited", c, nil, "response of type %s never requested", resp.TypeUrl)
	}
	var items []item
	seen := map[string]bool{}
	for _, res := range resp.Resources {
		name, content, poison, err := decodeRes(ts.typ, res.Resource)
		if err != nil {
			return r.fail("bad-resource", c, ts, "%s: %v", res.Name, err)
		}
		if name != res.Name {
			return r.fail("bad-resource", c, ts, "resource named %s carries %s", res.Name, name)
		}
		it := item{name: name, version: res.Version, content: content, poison: poison}
		it.v = r.w.hist[ts.typ][name][res.Version]
		items = append(items, it)
		if seen[name] {
			return r.fail("duplicate", c, ts, "%s twice in one response", name)
		}
		seen[name] = true
	}
	r.logf("%s ← %s #%s %v rm%v", c, typeName(ts.typ), resp.Nonce, items, resp.RemovedResources)
	for _, n := range resp.RemovedResources {
		if seen[n] {
			return r.fail("sent-and-removed", c, ts, "%s both in resources and removed_resources of #%s", n, resp.Nonce)
		}
	}
	for _, it := range items {
		if !sees(c.vis, it.name) {
			return r.fail("hidden-sent", c, ts, "%s sent to a client that may see only %s (in #%s)", it, visName(c.vis), resp.Nonce)
		}
	}
	for _, n := range resp.RemovedResources {
		if sees(c.vis, n) {
			continue
		}
		if ts.hiddenOK[n] < 1 {
			return r.fail("hidden-removed"+ts.context(), c, ts, "%s, which the client may not see, reported removed in #%s, not in answer to a request naming it", n, resp.Nonce)
		}
		ts.hiddenOK[n]--
		delete(ts.hiddenOwed, n)
	}
	for _, it := range items {
		switch {
		case it.v == nil:
			return r.fail("unknown-version", c, ts, "%s: a version never served", it)
		case it.v.content != it.content:
			return r.fail("unknown-version", c, ts, "%s: content differs from what was served at that version", it)
		case !ts.inWindow(it.name):
			return r.fail("unrequested", c, ts, "%s sent, not subscribed (interest %s)", it, &ts.in)
		}
		if h, ok := ts.held[it.name]; ok && h.version == it.version && !ts.resendOK[it.name] && !ts.resendAll && r.w.changed[ts.typ][it.name] < ts.heardWin[it.name] {
			return r.fail("resend"+ts.context(), c, ts, "%s resent at the version the client holds (in #%s)", it, resp.Nonce)
		}
		if ts.typ == eds {
			if v := r.checkOrder(c, it.name, []*mver{it.v}); v != nil {
				return v
			}
		}
	}
	for _, n := range resp.RemovedResources {
		if ts.budget[n] < 1 && r.w.changed[ts.typ][n] < ts.heardWin[n] {
			_, held := ts.held[n]
			return r.fail("removed"+ts.context(), c, ts, "%s reported removed in #%s: held=%v, subscribed=%v; not held since its last removal (or never)", n, resp.Nonce, held, ts.in.names[n])
		}
		ts.budget[n]--
	}
	for _, it := range items {
		delete(ts.owed, it.name)
		delete(ts.reanswer, it.name)
		ts.budget[it.name] = 1
	}
	for _, n := range resp.RemovedResources {
		delete(ts.owed, n)
		delete(ts.reanswer, n)
	}
	c.processed++
	ts.nonce = resp.Nonce
	for _, it := range items {
		if !it.poison {
			ts.answered(it.name)
		}
	}
	for _, n := range resp.RemovedResources {
		ts.answered(n)
	}
	if bad := poisoned(items); len(bad) > 0 {
		if v := r.rejected(c, ts, items, bad); v != nil {
			return v
		}
		for _, n := range resp.RemovedResources {
			ts.budget[n]++ // not applied: the removal may come again
			if !sees(c.vis, n) {
				ts.hiddenOK[n]++
				ts.hiddenOwed[n] = true
			}
		}
		return r.sendDelta(c, &discovery.DeltaDiscoveryRequest{TypeUrl: ts.typ, ResponseNonce: resp.Nonce,
			ErrorDetail: &status.Status{Code: 3, Message: "poison: " + strings.Join(bad, " ")}}, "NACK #"+resp.Nonce)
	}
	for _, it := range items {
		if ts.in.has(it.name) {
			ts.held[it.name] = heldRes{version: it.version, content: it.content}
		}
		ts.heardWin[it.name] = r.winSeq
	}
	for _, n := range resp.RemovedResources {
		delete(ts.held, n)
		ts.heardWin[n] = r.winSeq
	}
	return r.sendDelta(c, &discovery.DeltaDiscoveryRequest{TypeUrl: ts.typ, ResponseNonce: resp.Nonce}, "ACK #"+resp.Nonce)
}

// onSotw processes a sotw response. A sotw resource carries no version:
// the model knows it by content.
func (r *mrun) onSotw(c *mclient, resp *discovery.DiscoveryResponse) *violation {
	if resp.TypeUrl == lds {
		c.bpending--
		c.bnonce, c.bversion = resp.Nonce, resp.VersionInfo
		return nil
	}
	ts := c.types[resp.TypeUrl]
	if ts == nil || !ts.onStream {
		return r.fail("unsolicited", c, nil, "response of type %s never requested", resp.TypeUrl)
	}
	var items []item
	seen := map[string]bool{}
	for _, a := range resp.Resources {
		name, content, poison, err := decodeRes(ts.typ, a)
		if err != nil {
			return r.fail("bad-resource", c, ts, "%v", err)
		}
		items = append(items, item{name: name, content: content, poison: poison})
		if seen[name] {
			return r.fail("duplicate", c, ts, "%s twice in one response", name)
		}
		seen[name] = true
	}
	r.logf("%s ← %s #%s v=%s %v", c, typeName(ts.typ), resp.Nonce, short(resp.VersionInfo), items)
	for _, it := range items {
		if !sees(c.vis, it.name) {
			return r.fail("hidden-sent", c, ts, "%s sent to a client that may see only %s (in #%s)", it, visName(c.vis), resp.Nonce)
		}
	}
	for _, it := range items {
		cands := r.w.byContent[ts.typ][it.name][it.content]
		if len(cands) == 0 {
			return r.fail("unknown-version", c, ts, "%s: content never served", it)
		}
		if !ts.inWindow(it.name) {
			return r.fail("unrequested", c, ts, "%s sent, not subscribed (interest %s)", it, &ts.in)
		}
		if ts.typ == eds {
			// Resent with the same content: only if its version
			// changed (its cluster did) since the client got it.
			if h, ok := ts.held[it.name]; ok && h.content == it.content && !ts.resendOK[it.name] && !ts.resendAll && r.w.changed[eds][it.name] <= h.seq {
				return r.fail("resend"+ts.context(), c, ts, "%s resent unchanged (in #%s)", it, resp.Nonce)
			}
			if v := r.checkOrder(c, it.name, cands); v != nil {
				return v
			}
		}
	}
	if ts.typ == cds && !ts.first && !ts.subChanged && !ts.resendAll && !ts.afterNack {
		same := len(ts.held) == countIf(items, func(it item) bool { return ts.in.has(it.name) })
		for _, it := range items {
			if h, ok := ts.held[it.name]; ts.in.has(it.name) && (!ok || h.content != it.content) {
				same = false
			}
		}
		if same {
			return r.fail("resend"+ts.context(), c, ts, "full-state response #%s with nothing new: %v", resp.Nonce, items)
		}
	}
	c.processed++
	ts.nonce, ts.first = resp.Nonce, false
	if bad := poisoned(items); len(bad) > 0 {
		if v := r.rejected(c, ts, items, bad); v != nil {
			return v
		}
		return r.sendSotw(c, &discovery.DiscoveryRequest{TypeUrl: ts.typ, ResourceNames: ts.in.sotwList(), VersionInfo: ts.version,
			ResponseNonce: resp.Nonce, ErrorDetail: &status.Status{Code: 3, Message: "poison: " + strings.Join(bad, " ")}}, "NACK")
	}
	if ts.typ == cds { // full state
		clear(ts.held)
	}
	for _, it := range items {
		if ts.in.has(it.name) {
			ts.held[it.name] = heldRes{version: cands(r, ts.typ, it), content: it.content, seq: r.winSeq}
		}
	}
	ts.version = resp.VersionInfo
	return r.sendSotw(c, &discovery.DiscoveryRequest{TypeUrl: ts.typ, ResourceNames: ts.in.sotwList(), VersionInfo: ts.version, ResponseNonce: resp.Nonce}, "ACK")
}

// cands names the latest version of a sotw resource's content (for
// display and for CDS, where content is the version).
func cands(r *mrun, typ string, it item) string {
	l := r.w.byContent[typ][it.name][it.content]
	best := l[0]
	for _, v := range l {
		if v.seq > best.seq {
			best = v
		}
	}
	return best.version
}

// nackKey names a rejected version: delta by version, sotw by content.
func nackKey(c *mclient, it item) string {
	if c.delta {
		return it.name + "@" + it.version
	}
	return it.name + "@" + it.content
}

func poisoned(items []item) []string {
	var bad []string
	for _, it := range items {
		if it.poison {
			bad = append(bad, it.name)
		}
	}
	return bad
}

func countIf[T any](l []T, f func(T) bool) int {
	n := 0
	for _, x := range l {
		if f(x) {
			n++
		}
	}
	return n
}

// uniq is l without its repeats, in order.
func uniq(l []string) []string {
	seen := make(map[string]bool, len(l))
	return slices.DeleteFunc(slices.Clone(l), func(n string) bool {
		if seen[n] {
			return true
		}
		seen[n] = true
		return false
	})
}

// answered takes one of the subscriptions of n owed an answer, if any.
func (ts *tstate) answered(n string) bool {
	if ts.answers[n] == 0 {
		return false
	}
	ts.answers[n]--
	return true
}

// rejected records a NACK: the poison versions rejected and how often, and
// that the other resources of the response may come again.
func (r *mrun) rejected(c *mclient, ts *tstate, items []item, bad []string) *violation {
	ts.afterNack = true
	for _, it := range items {
		ts.resendOK[it.name] = true
		if !it.poison {
			continue
		}
		key := nackKey(c, it)
		ts.nacked[key] = true
		nc := ts.nacks[key]
		if changed := r.w.changed[ts.typ][it.name]; nc == nil || nc.changed != changed {
			// sotw knows a version by its content: a new version of
			// the same content (its cluster changed) counts anew.
			nc = &nackCount{changed: changed}
			ts.nacks[key] = nc
		}
		nc.maxSize = max(nc.maxSize, len(items))
		if ts.answered(it.name) {
			continue // sent in answer to a subscription: not a loop
		}
		nc.n++
		if bound := 2*int(math.Ceil(math.Log2(float64(nc.maxSize)))) + 2; nc.n > bound {
			return r.fail("nack-loop"+ts.context(), c, ts, "%s rejected %d times (bound %d for responses of up to %d resources)", it, nc.n, bound, nc.maxSize)
		}
	}
	return nil
}

// checkOrder: on an ADS stream, an assignment comes after its cluster. If
// the client's CDS interest in the name is stable (held across the window)
// and the cluster existed when this assignment version was served, the
// client must hold that cluster version, or a later one.
//
// Stable means of interest throughout the window, not only at both ends:
// a client that unsubscribes the cluster (or drops the wildcard it held it
// by) drops the cluster it held; an assignment the server sent for it
// while it was not wanted (the server's order is kept: the cluster went
// first, the client let it go) may arrive after the client wants it again
// but before the cluster is sent again. The protocol's order is the
// server's: "EDS updates (if any) must arrive after CDS updates for the
// respective clusters" (make before break), which they did; an
// assignment for a cluster the client no longer wants is an unrequested
// resource, which "the management server ... may also supply" (resource
// hints).
func (r *mrun) checkOrder(c *mclient, name string, cands []*mver) *violation {
	ct := c.types[cds]
	if !ct.in.has(name) || !ct.stable.has(name) || ct.left[name] || (ct.unwild != nil && !ct.unwild[name]) {
		return nil
	}
	h, held := ct.held[name]
	for _, v := range cands {
		if v.cluster == "" {
			return nil
		}
		if held && h.version == v.cluster {
			return nil
		}
		if cv := r.w.hist[cds][name][h.version]; held && cv != nil && cv.seq > v.seq {
			return nil
		}
	}
	got := "none"
	if held {
		got = short(h.version)
	}
	return r.fail("eds-before-cds", c, c.types[eds], "%s received while the client holds cluster %s at %s (assignment served with cluster %s)",
		cands[0], name, got, short(cands[0].cluster))
}

// --- at quiescence -----------------------------------------------------

// checkHeld compares what each client holds with what is served within
// its interest.
func (r *mrun) checkHeld(c *mclient) *violation {
	for _, typ := range modelTypes {
		ts := c.types[typ]
		var missing, stale, extra, unoffered []string
		for n, v := range r.w.served[typ] {
			if !ts.in.has(n) || !sees(c.vis, n) {
				continue // not of interest, or not to be seen: the filtered world
			}
			h, ok := ts.held[n]
			if v.poison {
				if !ts.nacked[nackKey(c, item{name: n, version: v.version, content: v.content})] {
					unoffered = append(unoffered, v.String())
				}
				continue
			}
			switch {
			case !ok:
				missing = append(missing, v.String())
			case c.delta && h.version != v.version, !c.delta && h.content != v.content:
				stale = append(stale, fmt.Sprintf("%s (holds %s)", v, short(h.version)))
			}
		}
		if c.delta || typ == cds { // sotw EDS cannot be told of removals
			for n, h := range ts.held {
				if v := r.w.served[typ][n]; v == nil || !sees(c.vis, n) {
					extra = append(extra, n+"@"+short(h.version))
				}
			}
		}
		sort.Strings(missing)
		sort.Strings(stale)
		sort.Strings(extra)
		sort.Strings(unoffered)
		if len(missing)+len(stale)+len(extra) > 0 {
			kind := "state"
			for _, x := range []struct {
				l    []string
				what string
			}{{missing, "-missing"}, {stale, "-stale"}, {extra, "-deleted"}} {
				if len(x.l) > 0 {
					kind += x.what
				}
			}
			return r.fail(kind+ts.context(), c, ts, "holds %s; interest %s: missing %v, stale %v, deleted but held %v", fmtHeld(ts.held), &ts.in, missing, stale, extra)
		}
		if len(unoffered) > 0 {
			return r.fail("poison-not-offered"+ts.context(), c, ts, "current poison versions %v never sent to the client", unoffered)
		}
		if len(ts.owed) > 0 {
			return r.fail("not-resent", c, ts, "re-subscribed %v not sent again", slices.Sorted(maps.Keys(ts.owed)))
		}
		var unanswered []string
		for n := range ts.reanswer {
			// A served version the client rejected is not sent again
			// (the server remembers it, delta.go), as above: its
			// rejection stands for the answer.
			if v := r.w.served[typ][n]; v != nil && v.poison && ts.nacked[nackKey(c, item{name: n, version: v.version, content: v.content})] {
				continue
			}
			if sees(c.vis, n) {
				unanswered = append(unanswered, n)
			}
		}
		if len(unanswered) > 0 {
			sort.Strings(unanswered)
			return r.fail("not-reanswered"+ts.context(), c, ts, "unsubscribed by name under the wildcard %v: neither sent again nor reported removed", unanswered)
		}
		// As of a name that does not exist: a wildcard subscription's
		// full check looks at the resources there are, not at the names
		// subscribed besides.
		if c.delta && !ts.in.wild && !ts.winWild {
			var untold []string
			for n := range ts.hiddenOwed {
				if ts.in.names[n] {
					untold = append(untold, n)
				}
			}
			if len(untold) > 0 {
				sort.Strings(untold)
				return r.fail("hidden-not-told"+ts.context(), c, ts, "subscribed %v, which the client may not see, never told they do not exist", untold)
			}
		}
	}
	return nil
}

func fmtHeld(m map[string]heldRes) string {
	var l []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		l = append(l, n+"@"+short(m[n].version))
	}
	return "[" + strings.Join(l, " ") + "]"
}

func fmtVersions(m map[string]string) string {
	var l []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		l = append(l, n+"@"+short(m[n]))
	}
	return "{" + strings.Join(l, " ") + "}"
}
