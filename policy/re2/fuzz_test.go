package re2

import (
	"testing"
)

// ProgramSize reads any pattern without panicking, gives the same answer
// twice, and an accepted pattern compiles to at least the fail
// instruction; a pattern it accepts, Check accepts at its size.
func FuzzProgramSize(f *testing.F) {
	for _, s := range []string{`/x\x{100}`, `(?:a+?){33}`, `[a-z]{1,50}`, `\C+(?s:.)*`, `(?i)[à-þ]`, `\Qa\C\E`, `[^\x00-\xff]`, `(?:a*)?b{2,}`, `^a$`, `\777`, `[[:word:]]\pN\PL`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		n, err := ProgramSize(pattern)
		n2, err2 := ProgramSize(pattern)
		if n != n2 || (err == nil) != (err2 == nil) {
			t.Fatalf("%q: %d, %v then %d, %v", pattern, n, err, n2, err2)
		}
		if err != nil {
			return
		}
		if n < 1 {
			t.Fatalf("%q: size %d", pattern, n)
		}
		if Check(pattern, n) != nil || Check(pattern, n-1) == nil {
			t.Fatalf("%q: Check disagrees with size %d", pattern, n)
		}
	})
}
