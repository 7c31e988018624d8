package re2

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// maxRune is the largest character Envoy's RE2 reads: it parses patterns
// as Latin-1, one character per byte (measured: \x{ff} is accepted,
// \x{100} refused, and \p{Greek} matches nothing).
const maxRune = 0xFF

// op is the kind of a node, after RE2's own (re2/regexp.h).
type op int

const (
	opNoMatch op = iota
	opEmpty
	opLiteral // runes, a LiteralString when more than one
	opClass   // ranges
	opAnyChar // (?s).: any character, one byte in Latin-1
	opAnyByte // \C
	opBeginLine
	opEndLine
	opBeginText
	opEndText
	opWordBoundary
	opNoWordBoundary
	opCapture
	opStar
	opPlus
	opQuest
	opRepeat
	opConcat
	opAlternate
)

// node is a parsed regex as RE2 holds it.
type node struct {
	op        op
	runes     []rune // opLiteral
	fold      bool   // opLiteral: ASCII case folding
	ranges    []rune // opClass: lo, hi pairs, sorted, at most maxRune
	nongreedy bool
	// flags are a repetition's parse flags, which RE2 compares before
	// merging two repetitions.
	flags    syntax.Flags
	min, max int // opRepeat; max -1: no maximum
	sub      []*node
}

func (n *node) isEmptyWidth() bool {
	return n.op >= opBeginLine && n.op <= opNoWordBoundary
}

// parse reads pattern as RE2 reads it with Envoy's options (RE2's
// defaults but Latin-1: see maxRune). Go's parser is a port of RE2's and
// parses the same syntax with these differences, handled here:
//   - RE2 refuses an escape naming a character above maxRune (\x{100},
//     \777); Go reads the pattern as UTF-8 and accepts any character.
//   - RE2 accepts \C (any byte); Go refuses it.
//   - RE2 knows Unicode classes by other names than Go 1.26 (groups.go).
//   - RE2 folds case only for ASCII letters in Latin-1; Go folds every
//     letter. Bytes above ASCII are given to Go's parser as stand-ins
//     that do not fold (highBase).
//   - RE2 merges a repetition of a repetition ((?:a*)? is a*); Go keeps
//     both (starPlusQuest).
//   - Classes are cut at maxRune, as RE2 cuts them.
//
// The rest (repetition counts above 1000 or nesting to more than 1000
// copies, (?P<n> and (?<n>, no possessive forms, lookaround,
// backreferences, \Z, \G, \e, (?x)) RE2 and Go agree on, as the golden
// file from Envoy checks.
func parse(pattern string) (*node, error) {
	pre, err := preprocess(pattern)
	if err != nil {
		return nil, err
	}
	// One character per byte; bytes above ASCII as stand-ins (no case
	// folding: RE2 folds only ASCII letters in Latin-1).
	var b strings.Builder
	for i := 0; i < len(pre); i++ {
		b.WriteRune(fromByte(pre[i]))
	}
	s := b.String()
	re, err := syntax.Parse(s, syntax.Perl)
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) {
			return nil, &Error{Msg: string(se.Code) + ": " + latin1(se.Expr)}
		}
		return nil, &Error{Msg: err.Error()}
	}
	return convert(re), nil
}

// highBase is where bytes 0x80 to 0xFF are moved for Go's parser: a
// block of unassigned characters (plane 14), which no Unicode class RE2
// knows holds and which have no case folding.
const highBase = 0xEFF00

// anyByte stands for \C in what Go's parser reads (unassigned too).
const anyByte = 0xEFE00

func fromByte(c byte) rune {
	if c < 0x80 {
		return rune(c)
	}
	return highBase + rune(c-0x80)
}

// toByte is the character (at most maxRune) that r stands for, or r.
func toByte(r rune) rune {
	if highBase <= r && r <= highBase+0x7F {
		return r - highBase + 0x80
	}
	return r
}

// latin1 turns back what Go's parser read into the pattern's bytes.
func latin1(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		switch {
		case r == anyByte:
			b = append(b, `\C`...)
		case toByte(r) <= maxRune:
			b = append(b, byte(toByte(r)))
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return string(b)
}

// preprocess refuses what RE2 refuses and Go's parser would accept, and
// rewrites what Go's parser would read otherwise than RE2, into a pattern
// for Go's parser (still one byte a character):
//   - a \x{...} or octal escape above maxRune is refused with RE2's
//     error text ("invalid escape sequence: \x{100", up to the digit
//     that went over), as is \C in a class;
//   - \C elsewhere becomes anyByte;
//   - \p{Name}, \pN, \P and \p{^Name} become the class's Latin-1
//     content (see group), or are refused when RE2 does not know the
//     name ("invalid character class range: \p{Name}").
func preprocess(p string) (string, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '[' && !inClass:
			inClass = true
			// A ] first in a class (after an optional ^) is literal.
			j := i + 1
			if j < len(p) && p[j] == '^' {
				j++
			}
			if j < len(p) && p[j] == ']' {
				j++
			} else {
				j = i + 1
			}
			b.WriteString(p[i:j])
			i = j - 1
			continue
		case c == '[' && inClass && strings.HasPrefix(p[i:], "[:"):
			if k := strings.Index(p[i:], ":]"); k >= 0 {
				b.WriteString(p[i : i+k+2])
				i += k + 1
				continue
			}
		case c == ']' && inClass:
			inClass = false
		case c == '\\' && i+1 < len(p):
			start := i
			i++
			switch p[i] {
			case 'Q':
				if !inClass {
					end := len(p)
					if k := strings.Index(p[i:], `\E`); k >= 0 {
						end = i + k + 2
					}
					b.WriteString(p[start:end])
					i = end - 1
					continue
				}
			case 'C':
				if inClass {
					return "", &Error{Msg: `invalid escape sequence: \C`}
				}
				fmt.Fprintf(&b, `\x{%x}`, anyByte)
				continue
			case '0', '1', '2', '3', '4', '5', '6', '7':
				v, j := 0, i
				for ; j < len(p) && j < i+3 && '0' <= p[j] && p[j] <= '7'; j++ {
					v = v*8 + int(p[j]-'0')
				}
				if v > maxRune {
					return "", &Error{Msg: "invalid escape sequence: " + p[start:j]}
				}
			case 'x':
				if i+1 < len(p) && p[i+1] == '{' {
					v := 0
					for j := i + 2; j < len(p) && isHex(p[j]); j++ {
						v = v*16 + unhex(p[j])
						if v > maxRune {
							return "", &Error{Msg: "invalid escape sequence: " + p[start:j+1]}
						}
					}
				}
			case 'p', 'P':
				end, name := i+1, ""
				switch {
				case end < len(p) && p[end] == '{':
					if k := strings.IndexByte(p[end:], '}'); k >= 0 {
						name, end = p[end+1:end+k], end+k+1
					}
				case end < len(p):
					name, end = p[end:end+1], end+1
				}
				if name == "" {
					break // Go's parser refuses it too
				}
				neg := p[i] == 'P'
				if strings.HasPrefix(name, "^") {
					neg, name = !neg, name[1:]
				}
				ranges, ok := group(name)
				if !ok {
					return "", &Error{Msg: "invalid character class range: " + p[start:end]}
				}
				b.WriteString(groupClass(ranges, neg, inClass))
				i = end - 1
				continue
			}
			b.WriteString(p[start : i+1])
			continue
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// groupClass writes Latin-1 ranges for Go's parser, bytes above ASCII as
// their stand-ins: as a class, or as ranges to go in one (inClass). A
// negated group in a class is written as its complement among the bytes.
func groupClass(ranges []rune, neg, inClass bool) string {
	if neg && inClass {
		var in [maxRune + 1]bool
		for i := 0; i+1 < len(ranges); i += 2 {
			for r := ranges[i]; r <= ranges[i+1]; r++ {
				in[r] = true
			}
		}
		var out []rune
		for r := rune(0); r <= maxRune; r++ {
			if in[r] {
				continue
			}
			if n := len(out); n > 0 && out[n-1] == r-1 {
				out[n-1] = r
			} else {
				out = append(out, r, r)
			}
		}
		ranges, neg = out, false
	}
	var b strings.Builder
	esc := func(r rune) { fmt.Fprintf(&b, `\x{%x}`, fromByte(byte(r))) }
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if lo < 0x80 && hi >= 0x80 { // split where the stand-ins begin
			esc(lo)
			b.WriteByte('-')
			esc(0x7f)
			lo = 0x80
		}
		esc(lo)
		b.WriteByte('-')
		esc(hi)
	}
	if b.Len() == 0 {
		// Nothing: a character no byte stands for.
		switch {
		case inClass:
			return `\x{10fffe}`
		case neg:
			return `[\x{0}-\x{10ffff}]`
		}
		return `[^\x{0}-\x{10ffff}]`
	}
	switch {
	case inClass:
		return b.String()
	case neg:
		return "[^" + b.String() + "]"
	}
	return "[" + b.String() + "]"
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) int {
	switch {
	case c <= '9':
		return int(c - '0')
	case c >= 'a':
		return int(c-'a') + 10
	}
	return int(c-'A') + 10
}

// simpleOps are the operators without arguments, as RE2 names them.
var simpleOps = map[syntax.Op]op{
	syntax.OpAnyChar: opAnyChar, syntax.OpBeginLine: opBeginLine, syntax.OpEndLine: opEndLine,
	syntax.OpBeginText: opBeginText, syntax.OpEndText: opEndText,
	syntax.OpWordBoundary: opWordBoundary, syntax.OpNoWordBoundary: opNoWordBoundary,
}

// convert turns Go's parse into RE2's, cutting classes at maxRune.
func convert(re *syntax.Regexp) *node {
	ng := re.Flags&syntax.NonGreedy != 0
	switch re.Op {
	case syntax.OpNoMatch:
		return &node{op: opNoMatch}
	case syntax.OpEmptyMatch:
		return &node{op: opEmpty}
	case syntax.OpLiteral:
		fold := re.Flags&syntax.FoldCase != 0
		var subs []*node
		var lit []rune
		flush := func() {
			if len(lit) > 0 {
				subs = append(subs, &node{op: opLiteral, runes: lit, fold: fold})
				lit = nil
			}
		}
		for _, r := range re.Rune {
			switch r = toByte(r); {
			case r == anyByte:
				flush()
				subs = append(subs, &node{op: opAnyByte})
				continue
			case r > maxRune: // from an empty group (groupClass)
				flush()
				subs = append(subs, &node{op: opNoMatch})
				continue
			}
			lit = append(lit, r)
		}
		flush()
		if len(subs) == 1 {
			return subs[0]
		}
		return &node{op: opConcat, sub: subs}
	case syntax.OpCharClass:
		return class(re.Rune)
	case syntax.OpAnyCharNotNL:
		return class([]rune{0, '\n' - 1, '\n' + 1, utf8.MaxRune})
	case syntax.OpAnyChar, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return &node{op: simpleOps[re.Op]}
	case syntax.OpCapture:
		return &node{op: opCapture, sub: []*node{convert(re.Sub[0])}}
	case syntax.OpStar:
		return starPlusQuest(opStar, convert(re.Sub[0]), re.Flags)
	case syntax.OpPlus:
		return starPlusQuest(opPlus, convert(re.Sub[0]), re.Flags)
	case syntax.OpQuest:
		return starPlusQuest(opQuest, convert(re.Sub[0]), re.Flags)
	case syntax.OpRepeat:
		return &node{op: opRepeat, nongreedy: ng, flags: re.Flags, min: re.Min, max: re.Max, sub: []*node{convert(re.Sub[0])}}
	case syntax.OpConcat, syntax.OpAlternate:
		n := &node{op: opConcat}
		if re.Op == syntax.OpAlternate {
			n.op = opAlternate
		}
		for _, s := range re.Sub {
			n.sub = append(n.sub, convert(s))
		}
		return n
	}
	return &node{op: opNoMatch}
}

// starPlusQuest is x*, x+ or x? as RE2 builds them (in its parser and
// Regexp::StarPlusOrQuest): with the same flags, a repetition of a
// repetition is the inner one when both are alike, else x*. Go's parser
// keeps (?:a*)? as it is.
func starPlusQuest(o op, sub *node, flags syntax.Flags) *node {
	if isStarPlusQuest(sub.op) && sub.flags == flags {
		if sub.op == o || sub.op == opStar {
			return sub
		}
		return &node{op: opStar, nongreedy: sub.nongreedy, flags: flags, sub: sub.sub}
	}
	return &node{op: o, nongreedy: flags&syntax.NonGreedy != 0, flags: flags, sub: []*node{sub}}
}

func isStarPlusQuest(o op) bool { return o == opStar || o == opPlus || o == opQuest }

// class is a character class cut at maxRune. A byte above ASCII is in it
// when its private-use stand-in (a literal byte) or the character itself
// (a Unicode class or escape) is; in a negated class (Go negates over all
// of Unicode, so the class holds utf8.MaxRune) when both are. As RE2's
// parser does, one character becomes a literal and an ASCII letter in
// both cases a literal folding case.
func class(rs []rune) *node {
	negated := len(rs) > 0 && rs[len(rs)-1] == utf8.MaxRune
	var real, stand [maxRune + 1]bool
	for i := 0; i+1 < len(rs); i += 2 {
		for r := rs[i]; r <= min(rs[i+1], maxRune); r++ {
			real[r] = true
		}
		for r := max(rs[i], highBase); r <= min(rs[i+1], highBase+0x7F); r++ {
			stand[toByte(r)] = true
		}
	}
	var in [maxRune + 1]bool
	for r := range in {
		switch {
		case r < 0x80:
			in[r] = real[r]
		case negated:
			in[r] = real[r] && stand[r]
		default:
			in[r] = real[r] || stand[r]
		}
	}
	var cut []rune
	count := 0
	for r := rune(0); r <= maxRune; r++ {
		if !in[r] {
			continue
		}
		count++
		if n := len(cut); n > 0 && cut[n-1] == r-1 {
			cut[n-1] = r
		} else {
			cut = append(cut, r, r)
		}
	}
	switch {
	case count == 0:
		return &node{op: opClass}
	case count == 1:
		return &node{op: opLiteral, runes: []rune{cut[0]}}
	case count == 2 && 'A' <= cut[0] && cut[0] <= 'Z' && classHas(cut, cut[0]+'a'-'A'):
		return &node{op: opLiteral, runes: []rune{cut[0] + 'a' - 'A'}, fold: true}
	}
	return &node{op: opClass, ranges: cut}
}

func classHas(rs []rune, r rune) bool {
	for i := 0; i+1 < len(rs); i += 2 {
		if rs[i] <= r && r <= rs[i+1] {
			return true
		}
	}
	return false
}
