// Package re2 tells, without RE2 itself, whether Envoy accepts a regular
// expression and how large the RE2 program it compiles to is.
//
// Envoy compiles every safe_regex with RE2 and refuses, with it the whole
// resource (a route configuration, for a route's matcher), a regex RE2
// cannot parse or whose program has more instructions than
// re2.max_program_size.error_level (100 unless the bootstrap's runtime
// says otherwise). Go's regexp/syntax parses a near relative of RE2's
// syntax but not the same one, and compiles a different program, so
// neither its parser nor its program size answers for Envoy.
//
// Check answers as Envoy 1.40 does:
//
//   - The pattern is read as Envoy's RE2 reads it, one character per byte
//     (Envoy 1.40's RE2 refuses any escape above \x{ff}: "invalid escape
//     sequence: \x{100"), with RE2's Perl-like flags; the syntax RE2
//     refuses and Go accepts is refused (see parse.go).
//   - The program is built as RE2 builds it (re2/simplify.cc, then
//     re2/compile.cc, then Prog::Optimize and Prog::Flatten in
//     re2/prog.cc) and its instructions counted as RE2's ProgramSize does
//     (see prog.go).
//
// The answers are compared with the real Envoy in this package's tests
// (testdata/envoy.golden, regenerated from Envoy by
// TestGoldenAgainstEnvoy).
//
// Check bounds its own work: a program certainly far over the limit is
// refused with a lower bound of its size ("at least"), without being
// built; and a regex compiling to more than 64 times the limit in
// instructions that flattening then drops (parts that match nothing, as
// (?:[^\x00-\xff]*){1000}) is refused as too large to count, where Envoy
// might accept it.
package re2

import (
	"errors"
	"fmt"
)

// DefaultMaxProgramSize is Envoy's default
// re2.max_program_size.error_level: a regex whose program has more
// instructions is refused.
const DefaultMaxProgramSize = 100

// errTooLargeToCount refuses a regex that compiles to more instructions
// than are counted against a limit (see checkInst).
var errTooLargeToCount = errors.New("it compiles to too many instructions to count (parts of it match nothing)")

// Error is a regex RE2 refuses, with RE2's own wording where it has one
// (Envoy passes RE2's message through).
type Error struct {
	Msg string
}

func (e *Error) Error() string { return e.Msg }

// ProgramSize returns the number of instructions of the program RE2
// compiles pattern to, as Envoy's RE2 counts them, or an *Error when RE2
// does not parse it.
func ProgramSize(pattern string) (int, error) {
	n, _, err := programSizeUpTo(pattern, 0)
	return n, err
}

// programSizeUpTo is ProgramSize, or for a large program certainly over
// limit (> 0) a lower bound of its size (exact false).
func programSizeUpTo(pattern string, limit int) (n int, exact bool, err error) {
	re, err := parse(pattern)
	if err != nil {
		return 0, false, err
	}
	n, exact = programSize(re, limit)
	switch n {
	case -1:
		return 0, false, &Error{Msg: "pattern too large - compile failed"}
	case -2:
		return 0, false, errTooLargeToCount
	}
	return n, exact, nil
}

// Check returns nil when Envoy accepts pattern with a program size limit
// of max, else an error saying why it is refused.
func Check(pattern string, max int) error {
	n, exact, err := programSizeUpTo(pattern, max)
	if err == errTooLargeToCount {
		return err
	}
	if err != nil {
		return fmt.Errorf("RE2 refuses it: %w", err)
	}
	if n > max {
		atLeast := ""
		if !exact {
			atLeast = "at least "
		}
		return fmt.Errorf("its RE2 program has %s%d instructions; Envoy refuses more than %d (re2.max_program_size.error_level)", atLeast, n, max)
	}
	return nil
}
