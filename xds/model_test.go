package xds_test

// TestModel is a randomized, seeded, model-based test of the serving path:
// histories of publishes and deletions, named and wildcard subscriptions,
// subscription changes (re-subscribing held names, "*" toggles, requests
// that repeat names: twice subscribed, twice unsubscribed, in both lists,
// "*" twice, a name unsubscribed that was never subscribed), ACKs and
// NACKs, reconnects with initial_resource_versions, split responses and
// requests crossing responses (among them unsubscriptions followed by
// "*" before the responses on their way arrive), each from a seed, by
// delta and sotw ADS clients of the real server, against a model of what
// each client must hold (model_client_test.go) and of what is served
// (model_world_test.go); the driver is model_run_test.go.
//
// Checked on every response as it arrives: no name both sent and removed;
// no resource resent at the version the client holds (except names it
// re-subscribed, those of a response it rejected, and, for delta, a name
// that changed since the client last heard of it: the compact state only
// knows that such a name may be held); a removal only of a name the client
// holds or subscribed to, and once (the same slack for delta); an assignment only
// after its cluster (when the client wants that cluster); no poison
// version rejected more often than isolating it takes. Checked at
// quiescence after every step: each client holds exactly what is served
// within its interest (sotw EDS: at least that, as sotw cannot remove an
// assignment), poison versions excepted, which must have been offered;
// a held name a delta client re-subscribed was sent again; a name a
// delta client unsubscribed by name under a wildcard (and let go) was
// sent again or reported removed (tstate.reanswer); every
// (stream, type) has an open watch (Stats().Watches).
// A failure prints the seed, the steps and the events up to the first
// violation; a minimised history can be kept in model_cases_test.go.
//
// Environment:
//
//	XDSBRIDGE_MODEL_SEED=N       replay one history, drawn with the same STEPS (its log is printed on failure)
//	XDSBRIDGE_MODEL_LONG=1       10,000 histories from a random base seed
//	XDSBRIDGE_MODEL_HISTORIES=N  number of histories (default 500, 50 with -short)
//	XDSBRIDGE_MODEL_STEPS=N      steps per history (default 12)
//	XDSBRIDGE_MODEL_BASE=N       first seed (default 1; LONG: from the clock)
//	XDSBRIDGE_MODEL_KEEPGOING=1  run every history, report each distinct failure
//	XDSBRIDGE_MODEL_SHRINK=1     minimise a failing history before reporting it
//	XDSBRIDGE_MODEL_NOPOISON=1   triage: the same histories without poison (no NACKs)
//	XDSBRIDGE_MODEL_NOVIS=1      triage: the same histories with every client seeing everything
//
// Some clients see only some names (xds.authorization resources, by their
// certificate; model_vis_test.go): for them the world is the filtered one.

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

type subMode int

const (
	subNone subMode = iota
	subLegacy
	subStar
	subNamed
)

// initSub is a client's first subscription to a type.
type initSub struct {
	mode  subMode
	names []string
}

func (s initSub) String() string {
	switch s.mode {
	case subLegacy:
		return "*(legacy)"
	case subStar:
		return "[*]"
	case subNamed:
		return fmt.Sprint(s.names)
	}
	return "none"
}

type clientSpec struct {
	delta    bool
	cds, eds initSub
	vis      int // visibility class (model_vis_test.go); 0: sees everything
}

func (cs clientSpec) init(typ string) initSub {
	if typ == cds {
		return cs.cds
	}
	return cs.eds
}

type opKind int

const (
	opCluster opKind = iota // upsert the cluster (variant: its content)
	opCLA                   // upsert the assignment (depends on the cluster)
	opDelete                // delete both
)

type op struct {
	kind    opKind
	name    string
	variant int
	poison  bool
}

type stepKind int

const (
	stPublish stepKind = iota
	stSub
	stUnsub
	stWild
	stReconnect
	stChange // one request with both lists, names repeated (names: subscribe, unsubs: unsubscribe)
)

type mstep struct {
	kind   stepKind
	client int
	typ    string
	names  []string
	unsubs []string // stChange
	on     bool
	ops    []op
	noWait bool // the next step goes before any response is processed
}

func (s *mstep) String() string {
	var b string
	switch s.kind {
	case stPublish:
		b = "publish " + fmtOps(s.ops)
	case stSub:
		b = fmt.Sprintf("c%d subscribe %s %v", s.client, typeName(s.typ), s.names)
	case stUnsub:
		b = fmt.Sprintf("c%d unsubscribe %s %v", s.client, typeName(s.typ), s.names)
	case stWild:
		w := "unsubscribe"
		if s.on {
			w = "subscribe"
		}
		b = fmt.Sprintf("c%d %s %s *", s.client, w, typeName(s.typ))
	case stReconnect:
		b = fmt.Sprintf("c%d reconnect", s.client)
	case stChange:
		b = fmt.Sprintf("c%d change %s sub=%v unsub=%v", s.client, typeName(s.typ), s.names, s.unsubs)
	}
	if s.noWait {
		b += "   (then at once:)"
	}
	return b
}

type mhistory struct {
	seed     uint64
	names    int // name space s0..s<names-1>
	maxBytes int // delta response bound (0: the cache's default)
	poison   bool
	clients  []clientSpec
	pre      []op // published before the clients connect
	steps    []mstep
}

func (h *mhistory) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  names s0..s%d, delta responses of at most %s, poison %v\n", h.names-1, bytesOrDefault(h.maxBytes), h.poison)
	for i, cs := range h.clients {
		p := "sotw "
		if cs.delta {
			p = "delta"
		}
		fmt.Fprintf(&b, "  c%d %s CDS %s EDS %s", i, p, cs.cds, cs.eds)
		if cs.vis != 0 {
			fmt.Fprintf(&b, " sees %s", visName(cs.vis))
		}
		b.WriteString("\n")
	}
	if len(h.pre) > 0 {
		fmt.Fprintf(&b, "  before connecting: publish %s\n", fmtOps(h.pre))
	}
	return b.String()
}

func bytesOrDefault(n int) string {
	if n == 0 {
		return "32 KiB"
	}
	return fmt.Sprintf("%d B", n)
}

func (h *mhistory) clone() *mhistory {
	c := *h
	c.clients = slices.Clone(h.clients)
	c.pre = slices.Clone(h.pre)
	c.steps = slices.Clone(h.steps)
	for i := range c.steps {
		c.steps[i].ops = slices.Clone(c.steps[i].ops)
	}
	return &c
}

// --- generation: a history is a function of its seed -----------------

type gen struct {
	rng    *rand.Rand
	h      *mhistory
	exists map[string]bool
	subs   []map[string]map[string]bool // client → type → names subscribed by name
}

func genHistory(seed uint64, steps int) *mhistory {
	g := &gen{rng: rand.New(rand.NewPCG(seed, 0x786473)), exists: map[string]bool{}}
	h := &mhistory{seed: seed, names: 6 + g.rng.IntN(5)}
	g.h = h
	if g.rng.IntN(2) == 0 {
		h.maxBytes = 150 + g.rng.IntN(800) // the bound counts the envelope (~130 B) and each resource's (~100 B)
	}
	h.poison = g.rng.IntN(2) == 0
	for range 2 + g.rng.IntN(3) {
		h.clients = append(h.clients, g.client())
	}
	if g.rng.IntN(3) > 0 {
		h.pre = g.publish(true)
	}
	// A quarter of the unsubscriptions are followed, one to three steps
	// later and before the client processes any response, by "*" of the
	// same client and type (starAt); a publish just before the
	// unsubscription does not wait either. The responses on their way
	// when the client takes the wildcard carry names it let go, and the
	// steps between change or delete them.
	starAt, star := -1, mstep{}
	for i := range steps {
		s := star
		if i != starAt {
			s = g.step()
		}
		s.noWait = i < steps-1 && (i < starAt || g.rng.IntN(4) == 0)
		h.steps = append(h.steps, s)
		if i >= starAt && i < steps-1 && (s.kind == stUnsub || s.kind == stChange) && g.rng.IntN(4) == 0 {
			starAt, star = min(i+1+g.rng.IntN(3), steps-1), mstep{kind: stWild, client: s.client, typ: s.typ, on: true}
			h.steps[i].noWait = true
			if i > 0 && h.steps[i-1].kind == stPublish {
				h.steps[i-1].noWait = true
			}
		}
	}
	genVis(h)
	return h
}

func (g *gen) name() string { return fmt.Sprintf("s%d", g.rng.IntN(g.h.names)) }

func (g *gen) pick(k int) []string {
	set := map[string]bool{}
	for len(set) < k {
		set[g.name()] = true
	}
	return slices.Sorted(maps.Keys(set))
}

func (g *gen) client() clientSpec {
	cs := clientSpec{delta: g.rng.IntN(5) < 3}
	subs := map[string]map[string]bool{cds: {}, eds: {}}
	switch g.rng.IntN(5) {
	case 0, 1:
		cs.cds.mode = subLegacy
	case 2:
		cs.cds.mode = subStar
	default:
		cs.cds = initSub{mode: subNamed, names: g.pick(1 + g.rng.IntN(4))}
	}
	switch g.rng.IntN(10) {
	case 0:
		cs.eds.mode = subLegacy
	case 1:
		cs.eds.mode = subStar
	case 2, 3:
	default:
		cs.eds = initSub{mode: subNamed, names: g.pick(1 + g.rng.IntN(4))}
	}
	for _, n := range cs.cds.names {
		subs[cds][n] = true
	}
	for _, n := range cs.eds.names {
		subs[eds][n] = true
	}
	g.subs = append(g.subs, subs)
	return cs
}

func (g *gen) publish(big bool) []op {
	var names []string
	if big {
		for i := range g.h.names {
			if g.rng.IntN(10) < 7 {
				names = append(names, fmt.Sprintf("s%d", i))
			}
		}
	} else {
		names = g.pick(1 + g.rng.IntN(3))
	}
	poison := func() bool { return g.h.poison && g.rng.IntN(5) == 0 }
	var ops []op
	for _, n := range names {
		if !g.exists[n] {
			g.exists[n] = true
			ops = append(ops, op{kind: opCluster, name: n, variant: g.rng.IntN(3)}, op{kind: opCLA, name: n, variant: g.rng.IntN(8), poison: poison()})
			continue
		}
		switch x := g.rng.IntN(20); {
		case x < 5:
			ops = append(ops, op{kind: opCluster, name: n, variant: g.rng.IntN(3)})
		case x < 12:
			ops = append(ops, op{kind: opCLA, name: n, variant: g.rng.IntN(8), poison: poison()})
		case x < 15:
			ops = append(ops, op{kind: opCluster, name: n, variant: g.rng.IntN(3)}, op{kind: opCLA, name: n, variant: g.rng.IntN(8), poison: poison()})
		default:
			ops = append(ops, op{kind: opDelete, name: n})
			g.exists[n] = false
		}
	}
	return ops
}

func (g *gen) step() mstep {
	c := g.rng.IntN(len(g.h.clients))
	typ := eds
	if g.rng.IntN(5) < 2 {
		typ = cds
	}
	subs := g.subs[c][typ]
	switch x := g.rng.IntN(100); {
	case x < 17:
		names := g.pick(1 + g.rng.IntN(3))
		for _, n := range names {
			subs[n] = true
		}
		return mstep{kind: stSub, client: c, typ: typ, names: names}
	case x < 29:
		names := g.pick(1 + g.rng.IntN(2))
		if len(subs) > 0 && g.rng.IntN(10) < 7 {
			keys := slices.Sorted(maps.Keys(subs))
			names = []string{keys[g.rng.IntN(len(keys))]}
		}
		for _, n := range names {
			delete(subs, n)
		}
		return mstep{kind: stUnsub, client: c, typ: typ, names: names}
	case x < 38:
		return mstep{kind: stWild, client: c, typ: typ, on: g.rng.IntN(2) == 0}
	case x < 45:
		return mstep{kind: stReconnect, client: c}
	case x < 50:
		return g.change(c, typ)
	default:
		return mstep{kind: stPublish, ops: g.publish(g.rng.IntN(10) == 0)}
	}
}

// change is a request that repeats names: the same name twice among the
// subscriptions or the unsubscriptions or in both, "*" twice, a name
// unsubscribed that was never subscribed; one to three of these, in a
// random order within each list (an unsubscription's effect depends on
// whether "*" came off before it).
func (g *gen) change(c int, typ string) mstep {
	subs := g.subs[c][typ]
	named := func() string { // preferably a name subscribed by name
		if len(subs) > 0 && g.rng.IntN(10) < 7 {
			keys := slices.Sorted(maps.Keys(subs))
			return keys[g.rng.IntN(len(keys))]
		}
		return g.name()
	}
	var sub, unsub []string
	for range 1 + g.rng.IntN(3) {
		switch g.rng.IntN(8) {
		case 0:
			n := g.name()
			sub = append(sub, n, n)
		case 1:
			n := named()
			unsub = append(unsub, n, n)
		case 2:
			n := named()
			sub, unsub = append(sub, n), append(unsub, n)
		case 3:
			sub = append(sub, "*", "*")
		case 4:
			unsub = append(unsub, "*", "*")
		case 5:
			sub = append(sub, "*")
		case 6: // a phantom unsubscription, once or twice
			n := g.name()
			if !subs[n] {
				unsub = append(unsub, n)
				if g.rng.IntN(2) == 0 {
					unsub = append(unsub, n)
				}
			}
		default:
			unsub = append(unsub, named())
		}
	}
	g.rng.Shuffle(len(sub), func(i, j int) { sub[i], sub[j] = sub[j], sub[i] })
	g.rng.Shuffle(len(unsub), func(i, j int) { unsub[i], unsub[j] = unsub[j], unsub[i] })
	for _, n := range sub {
		if n != "*" {
			subs[n] = true
		}
	}
	for _, n := range unsub {
		delete(subs, n)
	}
	return mstep{kind: stChange, client: c, typ: typ, names: sub, unsubs: unsub}
}

// --- running and reporting -------------------------------------------

type failure struct {
	h    *mhistory
	v    *violation
	step int
	log  []string
}

func runHistory(h *mhistory) (*failure, error) {
	r, err := newRun(h)
	if err != nil {
		return nil, err
	}
	v := r.run()
	r.close()
	if v == nil {
		return nil, nil
	}
	return &failure{h: h, v: v, step: r.stepNo, log: r.log}, nil
}

func (f *failure) report(logLines int) string {
	var b strings.Builder
	if f.h.seed != 0 {
		fmt.Fprintf(&b, "seed %d: ", f.h.seed)
	}
	fmt.Fprintf(&b, "after step %d of %d: [%s] %s\n", f.step, len(f.h.steps), f.v.kind, f.v.msg)
	if f.h.seed != 0 {
		// A history is drawn from its seed and its number of steps.
		fmt.Fprintf(&b, "replay: XDSBRIDGE_MODEL_SEED=%d XDSBRIDGE_MODEL_STEPS=%d go test -race -run 'TestModel$' ./xds/\n", f.h.seed, len(f.h.steps))
	}
	b.WriteString("history:\n")
	b.WriteString(f.h.String())
	for i, s := range f.h.steps {
		mark := " "
		if i+1 == f.step {
			mark = ">"
		}
		fmt.Fprintf(&b, "  %s%3d %s\n", mark, i+1, &s)
	}
	log := f.log
	if logLines > 0 && len(log) > logLines {
		fmt.Fprintf(&b, "last %d of %d events (step: event; c ← responses, c → requests, name@version, ☠ poison):\n", logLines, len(log))
		log = log[len(log)-logLines:]
	} else {
		b.WriteString("events (step: event; c ← responses, c → requests, name@version, ☠ poison):\n")
	}
	for _, l := range log {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// shrink looks for a smaller history failing with the same kind of
// violation: fewer clients, steps, operations, no crossing requests.
func shrink(f *failure, budget time.Duration) *failure {
	deadline := time.Now().Add(budget)
	best := f
	best.h = best.h.clone()
	best.h.steps = best.h.steps[:best.step]
	try := func(h *mhistory) bool {
		if time.Now().After(deadline) {
			return false
		}
		for range 2 { // timing varies: give it two chances
			g, err := runHistory(h)
			if err == nil && g != nil && g.v.kind == best.v.kind {
				g.h = g.h.clone()
				g.h.steps = g.h.steps[:g.step]
				best = g
				return true
			}
		}
		return false
	}
	for changed := true; changed && time.Now().Before(deadline); {
		changed = false
		for ci := len(best.h.clients) - 1; ci >= 0 && len(best.h.clients) > 1; ci-- {
			if ci < len(best.h.clients) && try(best.h.withoutClient(ci)) {
				changed = true
			}
		}
		for i := len(best.h.steps) - 1; i >= 0; i-- {
			if i < len(best.h.steps) {
				h := best.h.clone()
				h.steps = slices.Delete(h.steps, i, i+1)
				if try(h) {
					changed = true
				}
			}
		}
		if len(best.h.pre) > 0 {
			h := best.h.clone()
			h.pre = nil
			if try(h) {
				changed = true
			}
		}
		for j := len(best.h.pre) - 1; j >= 0; j-- {
			if j < len(best.h.pre) {
				h := best.h.clone()
				h.pre = slices.Delete(h.pre, j, j+1)
				if try(h) {
					changed = true
				}
			}
		}
		for i := 0; i < len(best.h.steps); i++ {
			for j := len(best.h.steps[i].ops) - 1; j >= 0; j-- {
				if i < len(best.h.steps) && j < len(best.h.steps[i].ops) && len(best.h.steps[i].ops) > 1 {
					h := best.h.clone()
					h.steps[i].ops = slices.Delete(h.steps[i].ops, j, j+1)
					if try(h) {
						changed = true
					}
				}
			}
		}
		for i := 0; i < len(best.h.steps); i++ {
			if best.h.steps[i].noWait {
				h := best.h.clone()
				h.steps[i].noWait = false
				if try(h) {
					changed = true
				}
			}
		}
		if best.h.maxBytes != 0 {
			h := best.h.clone()
			h.maxBytes = 0
			if try(h) {
				changed = true
			}
		}
	}
	return best
}

// withoutPoison drops the poison marks (triage: histories without NACKs).
func (h *mhistory) withoutPoison() {
	h.poison = false
	for i := range h.pre {
		h.pre[i].poison = false
	}
	for i := range h.steps {
		for j := range h.steps[i].ops {
			h.steps[i].ops[j].poison = false
		}
	}
}

func (h *mhistory) withoutClient(ci int) *mhistory {
	c := h.clone()
	c.clients = slices.Delete(c.clients, ci, ci+1)
	c.steps = slices.DeleteFunc(c.steps, func(s mstep) bool { return s.kind != stPublish && s.client == ci })
	for i := range c.steps {
		if c.steps[i].kind != stPublish && c.steps[i].client > ci {
			c.steps[i].client--
		}
	}
	return c
}

type modelConfig struct {
	histories, steps int
	base             uint64
	one              bool
	keepGoing        bool
	shrink           bool
	noPoison         bool // triage: no NACKs
	maxTime          time.Duration
}

func envInt(name string, def int) int {
	if s := os.Getenv(name); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	return def
}

func getModelConfig(t *testing.T) modelConfig {
	// About 16 s under -race on 2 cores; the time bound is for slower machines.
	cfg := modelConfig{histories: 500, steps: 12, base: 1, maxTime: 45 * time.Second}
	if testing.Short() {
		cfg.histories = 50
	}
	if os.Getenv("XDSBRIDGE_MODEL_LONG") != "" {
		cfg.histories, cfg.maxTime = 10000, 0
		cfg.base = uint64(time.Now().UnixNano()) % 1_000_000_000
	}
	cfg.histories = envInt("XDSBRIDGE_MODEL_HISTORIES", cfg.histories)
	cfg.steps = envInt("XDSBRIDGE_MODEL_STEPS", cfg.steps)
	if s := os.Getenv("XDSBRIDGE_MODEL_BASE"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("XDSBRIDGE_MODEL_BASE: %v", err)
		}
		cfg.base = n
	}
	if s := os.Getenv("XDSBRIDGE_MODEL_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("XDSBRIDGE_MODEL_SEED: %v", err)
		}
		cfg.base, cfg.histories, cfg.one, cfg.maxTime = n, 1, true, 0
	}
	if os.Getenv("XDSBRIDGE_MODEL_HISTORIES") != "" {
		cfg.maxTime = 0
	}
	cfg.keepGoing = os.Getenv("XDSBRIDGE_MODEL_KEEPGOING") != ""
	cfg.noPoison = os.Getenv("XDSBRIDGE_MODEL_NOPOISON") != ""
	cfg.shrink = os.Getenv("XDSBRIDGE_MODEL_SHRINK") != ""
	return cfg
}

func TestModel(t *testing.T) {
	setupModelTLS(t)
	cfg := getModelConfig(t)
	start := time.Now()
	type kind struct {
		n     int
		first *failure
		seeds []uint64
	}
	kinds := map[string]*kind{}
	runs, steps, visClients := 0, 0, 0
	for i := range cfg.histories {
		if cfg.maxTime > 0 && time.Since(start) > cfg.maxTime {
			t.Logf("model: stopping after %v", cfg.maxTime)
			break
		}
		h := genHistory(cfg.base+uint64(i), cfg.steps)
		if cfg.noPoison {
			h.withoutPoison()
		}
		f, err := runHistory(h)
		if err != nil {
			t.Fatal(err)
		}
		runs++
		for _, cs := range h.clients {
			if cs.vis != 0 {
				visClients++
			}
		}
		if f == nil {
			steps += len(h.steps)
			continue
		}
		steps += f.step
		k := kinds[f.v.kind]
		if k == nil {
			k = &kind{first: f}
			kinds[f.v.kind] = k
		}
		k.n++
		if len(k.seeds) < 8 {
			k.seeds = append(k.seeds, h.seed)
		}
		if !cfg.keepGoing {
			break
		}
	}
	t.Logf("model: %d histories × %d steps (%d steps run) from seed %d in %v; %d clients seeing only some names", runs, cfg.steps, steps, cfg.base, time.Since(start).Round(time.Millisecond), visClients)
	if len(kinds) == 0 {
		return
	}
	logLines := 80
	if cfg.one {
		logLines = 0
	}
	names := slices.Sorted(maps.Keys(kinds))
	sort.SliceStable(names, func(i, j int) bool { return kinds[names[i]].first.h.seed < kinds[names[j]].first.h.seed })
	var b strings.Builder
	fmt.Fprintf(&b, "%d distinct violations:\n", len(names))
	for _, n := range names {
		k := kinds[n]
		fmt.Fprintf(&b, "  %-44s %4d histories, seeds %v\n", n, k.n, k.seeds)
	}
	for _, n := range names {
		f := kinds[n].first
		if cfg.shrink {
			f = shrink(f, 60*time.Second)
			b.WriteString("\n--- minimised:\n")
		} else {
			b.WriteString("\n---\n")
		}
		b.WriteString(f.report(logLines))
	}
	t.Fatal(b.String())
}

// --- recorded cases ----------------------------------------------------

// parseHistory reads a history as a failure report prints it (the lines
// under "history:", step numbers and the ">" mark optional), so that a
// minimised failure can be kept as a case.
func parseHistory(text string) (*mhistory, error) {
	h := &mhistory{names: 10}
	parseSub := func(s string) (initSub, error) {
		switch s {
		case "none":
			return initSub{}, nil
		case "*(legacy)":
			return initSub{mode: subLegacy}, nil
		case "[*]":
			return initSub{mode: subStar}, nil
		}
		if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
			return initSub{}, fmt.Errorf("subscription %q", s)
		}
		return initSub{mode: subNamed, names: strings.Fields(strings.Trim(s, "[]"))}, nil
	}
	parseOps := func(s string) ([]op, error) {
		var ops []op
		for _, f := range strings.Fields(strings.Trim(s, "[]")) {
			kind, rest, _ := strings.Cut(f, ":")
			o := op{}
			if rest, o.poison = strings.CutSuffix(rest, "☠"); kind == "del" {
				o.kind, o.name = opDelete, rest
			} else {
				name, v, _ := strings.Cut(rest, "/")
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil, fmt.Errorf("operation %q", f)
				}
				o.name, o.variant = name, n
				switch kind {
				case "cds":
					o.kind = opCluster
				case "eds":
					o.kind = opCLA
				default:
					return nil, fmt.Errorf("operation %q", f)
				}
			}
			ops = append(ops, o)
		}
		return ops, nil
	}
	typeOf := map[string]string{"CDS": cds, "EDS": eds}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), ">"))
		if line == "" {
			continue
		}
		if f := strings.Fields(line); len(f) > 1 {
			if _, err := strconv.Atoi(f[0]); err == nil {
				line = strings.TrimSpace(strings.TrimPrefix(line, f[0]))
			}
		}
		var s mstep
		line, s.noWait = strings.CutSuffix(line, "(then at once:)")
		line = strings.TrimSpace(line)
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "names "):
			if i := strings.Index(line, "at most "); i >= 0 {
				if n, err := strconv.Atoi(strings.Fields(line[i+len("at most "):])[0]); err == nil && !strings.Contains(line, "KiB") {
					h.maxBytes = n
				}
			}
		case strings.HasPrefix(line, "before connecting: publish "):
			ops, err := parseOps(strings.TrimPrefix(line, "before connecting: publish "))
			if err != nil {
				return nil, err
			}
			h.pre = ops
		case strings.HasPrefix(line, "publish "):
			ops, err := parseOps(strings.TrimPrefix(line, "publish "))
			if err != nil {
				return nil, err
			}
			s.kind, s.ops = stPublish, ops
			h.steps = append(h.steps, s)
		case len(f) >= 2 && (f[1] == "delta" || f[1] == "sotw"):
			// c0 delta CDS <sub> EDS <sub> [sees <patterns>]
			cs := clientSpec{delta: f[1] == "delta"}
			if l, v, ok := strings.Cut(line, " sees "); ok {
				var known bool
				if cs.vis, known = parseVis(strings.TrimSpace(v)); !known {
					return nil, fmt.Errorf("visibility %q", v)
				}
				line = l
			}
			i := strings.Index(line, " CDS ")
			j := strings.Index(line, " EDS ")
			if i < 0 || j < i {
				return nil, fmt.Errorf("client %q", line)
			}
			var err error
			if cs.cds, err = parseSub(strings.TrimSpace(line[i+5 : j])); err != nil {
				return nil, err
			}
			if cs.eds, err = parseSub(strings.TrimSpace(line[j+5:])); err != nil {
				return nil, err
			}
			h.clients = append(h.clients, cs)
		case len(f) >= 2 && strings.HasPrefix(f[0], "c"):
			n, err := strconv.Atoi(f[0][1:])
			if err != nil {
				return nil, fmt.Errorf("step %q", line)
			}
			s.client = n
			switch {
			case f[1] == "reconnect":
				s.kind = stReconnect
			case len(f) >= 4 && f[1] == "change":
				// c0 change EDS sub=[s1 s1] unsub=[* *]
				s.kind, s.typ = stChange, typeOf[f[2]]
				subs, unsubs, ok := strings.Cut(strings.Join(f[3:], " "), " unsub=")
				subs, ok2 := strings.CutPrefix(subs, "sub=")
				if s.typ == "" || !ok || !ok2 {
					return nil, fmt.Errorf("step %q", line)
				}
				s.names, s.unsubs = strings.Fields(strings.Trim(subs, "[]")), strings.Fields(strings.Trim(unsubs, "[]"))
			case len(f) >= 4 && (f[1] == "subscribe" || f[1] == "unsubscribe"):
				s.typ = typeOf[f[2]]
				if s.typ == "" {
					return nil, fmt.Errorf("type in %q", line)
				}
				if f[3] == "*" {
					s.kind, s.on = stWild, f[1] == "subscribe"
				} else {
					s.kind, s.names = stSub, strings.Fields(strings.Trim(strings.Join(f[3:], " "), "[]"))
					if f[1] == "unsubscribe" {
						s.kind = stUnsub
					}
				}
			default:
				return nil, fmt.Errorf("step %q", line)
			}
			h.steps = append(h.steps, s)
		default:
			return nil, fmt.Errorf("line %q", line)
		}
	}
	for _, s := range h.steps {
		if s.kind != stPublish && s.client >= len(h.clients) {
			return nil, fmt.Errorf("step %s: no such client", &s)
		}
	}
	return h, nil
}
