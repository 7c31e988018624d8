package re2

import (
	"regexp/syntax"
	"sort"
)

// This file builds the program RE2 builds for a parsed regex and counts
// its instructions as RE2::ProgramSize does. It follows, rule by rule
// (written anew in Go, not copied):
//
//   - RE2::Init: a leading ^literal is taken out as a required prefix
//     and only the rest is compiled (Regexp::RequiredPrefix).
//   - re2/simplify.cc: adjacent repetitions of one literal or class are
//     coalesced (CoalesceWalker), x** is x*, x{n,m} is n copies of x then
//     (x(x(x)?)?)? (SimplifyRepeat), an empty-width x{n,m} at most once,
//     an empty class matches nothing.
//   - re2/compile.cc: instructions are allocated in the order RE2
//     allocates them, a leading \A and trailing \z are taken out as the
//     program's anchors (IsAnchorStart, IsAnchorEnd), a nullable x* is
//     (x+)?, a class is one byte range per range joined by Alt
//     instructions (Latin-1), a capture is two instructions, and an
//     unanchored program starts with a non-greedy loop over any byte.
//   - re2/prog.cc: Optimize skips no-ops and marks the Alt of a .* loop
//     in front of a match (AltMatch), from the anchored start only;
//     Flatten cuts the program into lists at the targets of byte ranges,
//     captures and empty-width instructions (and at instructions that
//     can be reached from two lists), and emits each list's reachable
//     instructions, Alt and Nop dissolved and a Nop for each jump into
//     another list. ProgramSize is the number of flattened instructions.

type instOp int

const (
	iFail instOp = iota
	iAlt
	iAltMatch
	iByteRange
	iCapture
	iEmptyWidth
	iMatch
	iNop
)

type inst struct {
	op       instOp
	out      int
	out1     int // iAlt
	lo, hi   int // iByteRange
	foldcase bool
}

// hole is an unpatched out (second: out1) of an instruction.
type hole struct {
	id     int
	second bool
}

type frag struct {
	begin    int // 0: matches nothing
	end      []hole
	nullable bool
}

type compiler struct {
	inst     []inst
	max      int // instructions compiled at most (maxInst, or checkInst)
	tooLarge bool
}

// maxInst bounds the instructions compiled. RE2 stops at about 700,000
// with the memory Envoy gives it ("pattern too large - compile
// failed"); a program this large is far over any program size limit.
const maxInst = 1 << 19

// checkInst bounds the instructions compiled to check a program against
// a limit: beyond, the regex is refused without its size. Only parts
// that match nothing ([^\x00-\xff]* compiles to an instruction that
// flattening drops) can make that many for a program within the limit.
func checkInst(limit int) int { return max(exactUpTo, 64*limit) }

func (c *compiler) alloc(in inst) int {
	if len(c.inst) >= c.max {
		// Keep going on instruction 0 (the fail instruction): the
		// result is thrown away.
		c.tooLarge = true
		return 0
	}
	c.inst = append(c.inst, in)
	return len(c.inst) - 1
}

func (c *compiler) patch(l []hole, to int) {
	for _, h := range l {
		if h.second {
			c.inst[h.id].out1 = to
		} else {
			c.inst[h.id].out = to
		}
	}
}

func appendHoles(a, b []hole) []hole {
	return append(append([]hole(nil), a...), b...)
}

func (c *compiler) cat(a, b frag) frag {
	if a.begin == 0 || b.begin == 0 {
		return frag{}
	}
	if in := c.inst[a.begin]; in.op == iNop && len(a.end) == 1 && a.end[0] == (hole{a.begin, false}) && in.out == 0 {
		c.patch(a.end, b.begin)
		return b
	}
	c.patch(a.end, b.begin)
	return frag{a.begin, b.end, a.nullable && b.nullable}
}

func (c *compiler) alt(a, b frag) frag {
	if a.begin == 0 {
		return b
	}
	if b.begin == 0 {
		return a
	}
	id := c.alloc(inst{op: iAlt, out: a.begin, out1: b.begin})
	return frag{id, appendHoles(a.end, b.end), a.nullable || b.nullable}
}

// loop is the Alt of x+, x* and x?: greedy, it tries x (out) first.
func (c *compiler) loop(a frag, nongreedy bool) (int, hole) {
	if nongreedy {
		return c.alloc(inst{op: iAlt, out1: a.begin}), hole{0, false}
	}
	return c.alloc(inst{op: iAlt, out: a.begin}), hole{0, true}
}

func (c *compiler) plus(a frag, nongreedy bool) frag {
	id, h := c.loop(a, nongreedy)
	h.id = id
	c.patch(a.end, id)
	return frag{a.begin, []hole{h}, a.nullable}
}

func (c *compiler) star(a frag, nongreedy bool) frag {
	if a.nullable {
		return c.quest(c.plus(a, nongreedy), nongreedy)
	}
	id, h := c.loop(a, nongreedy)
	h.id = id
	c.patch(a.end, id)
	return frag{id, []hole{h}, true}
}

func (c *compiler) quest(a frag, nongreedy bool) frag {
	if a.begin == 0 {
		return c.nop()
	}
	id, h := c.loop(a, nongreedy)
	h.id = id
	return frag{id, appendHoles([]hole{h}, a.end), true}
}

func (c *compiler) byteRange(lo, hi int, fold bool) frag {
	id := c.alloc(inst{op: iByteRange, lo: lo & 0xFF, hi: hi & 0xFF, foldcase: fold})
	return frag{id, []hole{{id, false}}, false}
}

func (c *compiler) nop() frag {
	id := c.alloc(inst{op: iNop})
	return frag{id, []hole{{id, false}}, true}
}

func (c *compiler) emptyWidth() frag {
	id := c.alloc(inst{op: iEmptyWidth})
	return frag{id, []hole{{id, false}}, true}
}

func (c *compiler) capture(a frag) frag {
	if a.begin == 0 {
		return frag{}
	}
	id := c.alloc(inst{op: iCapture, out: a.begin})
	c.alloc(inst{op: iCapture})
	c.patch(a.end, id+1)
	return frag{id, []hole{{id + 1, false}}, a.nullable}
}

// class compiles ranges as RE2 does in Latin-1: a byte range each, the
// ones after the first joined by an Alt in front of those before.
func (c *compiler) class(ranges []rune) frag {
	foldASCII := foldsASCII(ranges)
	var f frag
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if foldASCII && 'A' <= lo && hi <= 'Z' {
			continue
		}
		fold := foldASCII
		if (lo <= 'A' && 'z' <= hi) || hi < 'A' || 'z' < lo || ('Z' < lo && hi < 'a') {
			fold = false
		}
		if lo > maxRune || lo > hi {
			continue
		}
		b := c.byteRange(int(lo), int(min(hi, maxRune)), fold)
		if f.begin == 0 {
			f = frag{begin: b.begin, end: b.end}
			continue
		}
		id := c.alloc(inst{op: iAlt, out: f.begin, out1: b.begin})
		f = frag{begin: id, end: appendHoles(f.end, b.end)}
	}
	return f
}

// classRanges is how many byte ranges a class compiles to (see class).
func classRanges(ranges []rune) int {
	fold, n := foldsASCII(ranges), 0
	for i := 0; i+1 < len(ranges); i += 2 {
		if !(fold && 'A' <= ranges[i] && ranges[i+1] <= 'Z') {
			n++
		}
	}
	return n
}

// foldsASCII reports whether every ASCII letter of the class comes with
// its other case (RE2's CharClass::FoldsASCII).
func foldsASCII(ranges []rune) bool {
	for r := rune('A'); r <= 'Z'; r++ {
		if classHas(ranges, r) != classHas(ranges, r+'a'-'A') {
			return false
		}
	}
	return true
}

func (c *compiler) compile(n *node) frag {
	if c.tooLarge {
		return frag{}
	}
	switch n.op {
	case opNoMatch:
		return frag{}
	case opEmpty:
		return c.nop()
	case opLiteral:
		if len(n.runes) == 0 {
			return c.nop()
		}
		var f frag
		for i, r := range n.runes {
			b := c.byteRange(int(r), int(r), n.fold)
			if i == 0 {
				f = b
			} else {
				f = c.cat(f, b)
			}
		}
		return f
	case opClass:
		return c.class(n.ranges)
	case opAnyChar, opAnyByte:
		return c.byteRange(0, 0xFF, false)
	case opBeginLine, opEndLine, opBeginText, opEndText, opWordBoundary, opNoWordBoundary:
		return c.emptyWidth()
	case opCapture:
		return c.capture(c.compile(n.sub[0]))
	case opStar:
		return c.star(c.compile(n.sub[0]), n.nongreedy)
	case opPlus:
		return c.plus(c.compile(n.sub[0]), n.nongreedy)
	case opQuest:
		return c.quest(c.compile(n.sub[0]), n.nongreedy)
	case opConcat, opAlternate:
		fs := make([]frag, len(n.sub))
		for i, s := range n.sub {
			fs[i] = c.compile(s)
		}
		f := fs[0]
		for _, g := range fs[1:] {
			if n.op == opConcat {
				f = c.cat(f, g)
			} else {
				f = c.alt(f, g)
			}
		}
		return f
	}
	return frag{}
}

// exactUpTo is the size up to which programSize counts exactly, even
// with a limit (a program that size takes a millisecond).
const exactUpTo = 10000

// programSize compiles re as RE2::Init does and counts the flattened
// program; -1 when it has more than maxInst instructions. With limit > 0,
// a program certainly larger than limit and than exactUpTo (see
// lowerBound) is not compiled: the count returned is then a lower bound,
// and exact false; as it is when the program compiles to more than
// checkInst(limit) instructions, or -2 if not certainly over limit.
func programSize(re *node, limit int) (n int, exact bool) {
	re = requiredPrefix(re)
	re = simplify(coalesce(re))
	lb := 0
	if limit > 0 {
		// Less the anchors, which the compiler may take out.
		lb = lowerBound(re, map[*node]int{}) - 2
		if lb > limit && lb > exactUpTo {
			return lb, false
		}
	}
	re, anchorStart := anchor(re, 0, true)
	re, _ = anchor(re, 0, false)
	c := &compiler{inst: []inst{{op: iFail}}, max: maxInst}
	if limit > 0 {
		c.max = checkInst(limit)
	}
	all := c.compile(re)
	m := c.alloc(inst{op: iMatch})
	all = c.cat(all, frag{m, nil, false})
	start := all.begin
	if !anchorStart {
		any := c.byteRange(0, 0xFF, false)
		all = c.cat(c.star(any, true), all)
	}
	startUnanchored := all.begin
	switch {
	case c.tooLarge && lb > limit:
		return lb, false
	case c.tooLarge && limit > 0:
		return -2, false
	case c.tooLarge:
		return -1, true
	}
	if start == 0 && startUnanchored == 0 {
		return 1, true
	}
	c.optimize(start)
	return c.flatten(start, startUnanchored), true
}

// lowerBound is at most the number of instructions the flattened
// program of a simplified re holds, less its match instruction: each
// byte range, capture and empty-width instruction that can be reached is
// emitted once; a literal is a byte range per character, a class one per
// range, a capture two. A part that matches nothing (0, -1 here) compiles
// to nothing reachable. It takes time in the size of the tree, not of the
// program (x{1000} is one node used 1000 times), and lets Check refuse a
// huge program without building it.
func lowerBound(re *node, memo map[*node]int) int {
	if n, ok := memo[re]; ok {
		return n
	}
	n := 0
	switch re.op {
	case opNoMatch:
		n = -1
	case opLiteral:
		n = len(re.runes)
	case opClass:
		n = classRanges(re.ranges)
		if len(re.ranges) == 0 {
			n = -1
		}
	case opAnyChar, opAnyByte, opBeginLine, opEndLine, opBeginText, opEndText, opWordBoundary, opNoWordBoundary:
		n = 1
	case opCapture, opPlus:
		n = lowerBound(re.sub[0], memo)
		if n >= 0 && re.op == opCapture {
			n += 2
		}
	case opStar, opQuest:
		n = max(lowerBound(re.sub[0], memo), 0)
	case opConcat:
		for _, s := range re.sub {
			k := lowerBound(s, memo)
			if k < 0 {
				n = -1
				break
			}
			n += k
		}
	case opAlternate:
		n = -1
		for _, s := range re.sub {
			if k := lowerBound(s, memo); k >= 0 {
				n = max(n, 0) + k
			}
		}
	}
	memo[re] = n
	return n
}

// requiredPrefix drops a leading ^literal (RE2 matches it apart).
func requiredPrefix(re *node) *node {
	if re.op != opConcat {
		return re
	}
	i := 0
	for i < len(re.sub) && re.sub[i].op == opBeginText {
		i++
	}
	if i == 0 || i >= len(re.sub) || re.sub[i].op != opLiteral {
		return re
	}
	rest := re.sub[i+1:]
	switch len(rest) {
	case 0:
		return &node{op: opEmpty}
	case 1:
		return rest[0]
	}
	return &node{op: opConcat, sub: rest}
}

// anchor takes out a leading \A (start) or trailing \z, looking through
// concatenations and captures to depth 4 (IsAnchorStart, IsAnchorEnd).
func anchor(re *node, depth int, start bool) (*node, bool) {
	if depth >= 4 {
		return re, false
	}
	switch re.op {
	case opConcat:
		if len(re.sub) == 0 {
			return re, false
		}
		i := len(re.sub) - 1
		if start {
			i = 0
		}
		s, ok := anchor(re.sub[i], depth+1, start)
		if !ok {
			return re, false
		}
		subs := append([]*node(nil), re.sub...)
		subs[i] = s
		return &node{op: opConcat, sub: subs}, true
	case opCapture:
		s, ok := anchor(re.sub[0], depth+1, start)
		if !ok {
			return re, false
		}
		return &node{op: opCapture, sub: []*node{s}}, true
	case opBeginText:
		if start {
			return &node{op: opLiteral}, true
		}
	case opEndText:
		if !start {
			return &node{op: opLiteral}, true
		}
	}
	return re, false
}

func isRepeatOp(o op) bool {
	return o == opStar || o == opPlus || o == opQuest || o == opRepeat
}

// coalesce merges, in every concatenation, a repetition of a literal
// character or class with what follows it when that is the same
// character or class, repeated or not (CoalesceWalker): a+a* is a{1,}.
func coalesce(re *node) *node {
	for i, s := range re.sub {
		re.sub[i] = coalesce(s)
	}
	if re.op != opConcat {
		return re
	}
	subs := re.sub
	for i := 0; i+1 < len(subs); i++ {
		r1, r2 := subs[i], subs[i+1]
		if !canCoalesce(r1, r2) {
			continue
		}
		nre := &node{op: opRepeat, nongreedy: r1.nongreedy, flags: r1.flags, sub: []*node{r1.sub[0]}}
		switch r1.op {
		case opStar:
			nre.min, nre.max = 0, -1
		case opPlus:
			nre.min, nre.max = 1, -1
		case opQuest:
			nre.min, nre.max = 0, 1
		default:
			nre.min, nre.max = r1.min, r1.max
		}
		switch {
		case r2.op == opStar:
			nre.max = -1
		case r2.op == opPlus:
			nre.min++
			nre.max = -1
		case r2.op == opQuest:
			if nre.max != -1 {
				nre.max++
			}
		case r2.op == opRepeat:
			nre.min += r2.min
			if r2.max == -1 {
				nre.max = -1
			} else if nre.max != -1 {
				nre.max += r2.max
			}
		case r2.op == opLiteral && len(r2.runes) > 1:
			nre.min++
			if nre.max != -1 {
				nre.max++
			}
			rest := &node{op: opLiteral, runes: r2.runes[1:], fold: r2.fold}
			subs[i], subs[i+1] = nre, rest
			continue
		default:
			nre.min++
			if nre.max != -1 {
				nre.max++
			}
		}
		subs[i], subs[i+1] = &node{op: opEmpty}, nre
	}
	return re
}

func canCoalesce(r1, r2 *node) bool {
	if !isRepeatOp(r1.op) {
		return false
	}
	s := r1.sub[0]
	if s.op == opLiteral && len(s.runes) != 1 || s.op != opLiteral && s.op != opClass && s.op != opAnyChar && s.op != opAnyByte {
		return false
	}
	if isRepeatOp(r2.op) && equal(s, r2.sub[0]) && r1.nongreedy == r2.nongreedy {
		return true
	}
	if equal(s, r2) {
		return true
	}
	return s.op == opLiteral && r2.op == opLiteral && len(r2.runes) > 1 && r2.runes[0] == s.runes[0] && s.fold == r2.fold
}

func equal(a, b *node) bool {
	if a.op != b.op {
		return false
	}
	switch a.op {
	case opLiteral:
		return a.fold == b.fold && string(a.runes) == string(b.runes)
	case opClass:
		return string(a.ranges) == string(b.ranges)
	case opAnyChar, opAnyByte:
		return true
	}
	return false
}

// simplify rewrites repetitions as RE2's SimplifyWalker does. It
// returns re itself when nothing under it changes.
func simplify(re *node) *node {
	changed := false
	subs := make([]*node, len(re.sub))
	for i, s := range re.sub {
		subs[i] = simplify(s)
		changed = changed || subs[i] != s
	}
	switch re.op {
	case opClass:
		if len(re.ranges) == 0 {
			return &node{op: opNoMatch}
		}
	case opConcat, opAlternate, opCapture:
		if changed {
			return &node{op: re.op, sub: subs}
		}
	case opStar, opPlus, opQuest:
		s := subs[0]
		if s.op == opEmpty {
			return s
		}
		if !changed {
			return re
		}
		if s.op == re.op && s.flags == re.flags {
			return s
		}
		return &node{op: re.op, nongreedy: re.nongreedy, flags: re.flags, sub: subs}
	case opRepeat:
		s := subs[0]
		if s.op == opEmpty {
			return s
		}
		return simplifyRepeat(s, re.min, re.max, re.flags)
	}
	return re
}

// simplifyRepeat is x{lo,hi} (hi -1: no maximum) as RE2 writes it with
// x*, x+ and x? (SimplifyRepeat).
func simplifyRepeat(x *node, lo, hi int, f syntax.Flags) *node {
	allEmpty := x.isEmptyWidth()
	if x.op == opConcat || x.op == opAlternate {
		allEmpty = true
		for _, s := range x.sub {
			allEmpty = allEmpty && s.isEmptyWidth()
		}
	}
	if allEmpty {
		lo, hi = min(lo, 1), min(hi, 1)
	}
	if hi == -1 {
		switch lo {
		case 0:
			return starPlusQuest(opStar, x, f)
		case 1:
			return starPlusQuest(opPlus, x, f)
		}
		subs := make([]*node, 0, lo)
		for i := 0; i < lo-1; i++ {
			subs = append(subs, x)
		}
		subs = append(subs, starPlusQuest(opPlus, x, f))
		return &node{op: opConcat, sub: subs}
	}
	if lo == 0 && hi == 0 {
		return &node{op: opEmpty}
	}
	if lo == 1 && hi == 1 {
		return x
	}
	var nre *node
	if lo > 0 {
		subs := make([]*node, lo)
		for i := range subs {
			subs[i] = x
		}
		nre = &node{op: opConcat, sub: subs}
	}
	if hi > lo {
		suf := starPlusQuest(opQuest, x, f)
		for i := lo + 1; i < hi; i++ {
			suf = starPlusQuest(opQuest, &node{op: opConcat, sub: []*node{x, suf}}, f)
		}
		if nre == nil {
			nre = suf
		} else {
			nre = &node{op: opConcat, sub: []*node{nre, suf}}
		}
	}
	if nre == nil {
		return &node{op: opNoMatch}
	}
	return nre
}

// optimize skips no-ops and marks AltMatch, from start only (Prog::Optimize).
func (c *compiler) optimize(start int) {
	skip := func(j int) int {
		for j != 0 && c.inst[j].op == iNop {
			j = c.inst[j].out
		}
		return j
	}
	queue := func(visit func(id int, add func(int))) {
		seen := map[int]bool{}
		var q []int
		add := func(id int) {
			if id != 0 && !seen[id] {
				seen[id] = true
				q = append(q, id)
			}
		}
		add(start)
		for i := 0; i < len(q); i++ {
			visit(q[i], add)
		}
	}
	queue(func(id int, add func(int)) {
		in := &c.inst[id]
		in.out = skip(in.out)
		add(in.out)
		if in.op == iAlt {
			in.out1 = skip(in.out1)
			add(in.out1)
		}
	})
	queue(func(id int, add func(int)) {
		in := &c.inst[id]
		add(in.out)
		if in.op == iAlt {
			add(in.out1)
		}
		if in.op != iAlt {
			return
		}
		j, k := c.inst[in.out], c.inst[in.out1]
		if j.op == iByteRange && j.out == id && j.lo == 0 && j.hi == 0xFF && c.isMatch(in.out1) ||
			c.isMatch(in.out) && k.op == iByteRange && k.out == id && k.lo == 0 && k.hi == 0xFF {
			in.op = iAltMatch
		}
	})
}

func (c *compiler) isMatch(id int) bool {
	for {
		switch in := c.inst[id]; in.op {
		case iCapture, iNop:
			id = in.out
		case iMatch:
			return true
		default:
			return false
		}
	}
}

// flattener holds Prog::Flatten's bookkeeping, indexed by instruction.
type flattener struct {
	c      *compiler
	isRoot []bool
	roots  []int // in the order found, as RE2's rootmap
	stamp  []int // the list walk that last saw each instruction
	walk   int
	seen   []int // the instructions the current walk saw
}

func (f *flattener) addRoot(id int) {
	if !f.isRoot[id] {
		f.isRoot[id] = true
		f.roots = append(f.roots, id)
	}
}

// flatten counts the instructions of the flattened program (Prog::Flatten).
func (c *compiler) flatten(start, startUnanchored int) int {
	n := len(c.inst)
	f := &flattener{c: c, isRoot: make([]bool, n), stamp: make([]int, n)}
	f.addRoot(0)
	f.addRoot(startUnanchored)
	f.addRoot(start)
	preds := make([][]int, n)
	reach := make([]bool, n)
	stk := []int{startUnanchored}
	for len(stk) > 0 {
		id := stk[len(stk)-1]
		stk = stk[:len(stk)-1]
		for !reach[id] {
			reach[id] = true
			in := c.inst[id]
			switch in.op {
			case iAlt, iAltMatch:
				preds[in.out] = append(preds[in.out], id)
				preds[in.out1] = append(preds[in.out1], id)
				stk = append(stk, in.out1)
				id = in.out
				continue
			case iByteRange, iCapture, iEmptyWidth:
				f.addRoot(in.out)
				id = in.out
				continue
			case iNop:
				id = in.out
				continue
			}
			break
		}
	}
	// Mark dominators, highest id first, over the roots found so far.
	sorted := append([]int(nil), f.roots...)
	sort.Ints(sorted)
	for i := len(sorted) - 1; i > 0; i-- {
		root := sorted[i]
		if root == startUnanchored || root == start {
			continue
		}
		f.list(root, nil)
		for _, id := range f.seen {
			for _, p := range preds[id] {
				if f.stamp[p] != f.walk {
					f.addRoot(id)
				}
			}
		}
	}
	count := 0
	for i := 0; i < len(f.roots); i++ {
		f.list(f.roots[i], &count)
	}
	return count
}

// list walks the list from root as MarkDominator and EmitList do (f.seen
// holds what it saw), counting into count the instructions EmitList
// would emit.
func (f *flattener) list(root int, count *int) {
	f.walk++
	f.seen = f.seen[:0]
	emit := func() {
		if count != nil {
			*count++
		}
	}
	stk := []int{root}
	for len(stk) > 0 {
		id := stk[len(stk)-1]
		stk = stk[:len(stk)-1]
		for f.stamp[id] != f.walk {
			f.stamp[id] = f.walk
			f.seen = append(f.seen, id)
			if id != root && f.isRoot[id] {
				emit() // a Nop jumping to that list
				break
			}
			in := f.c.inst[id]
			if in.op == iAltMatch {
				emit()
			}
			if in.op == iAlt || in.op == iAltMatch {
				stk = append(stk, in.out1)
				id = in.out
				continue
			}
			if in.op == iNop {
				id = in.out
				continue
			}
			emit()
			break
		}
	}
}
