package load

import (
	"runtime"
	"testing"
)

// TestChildPeakRSSIsItsOwn: a serving child's peak RSS is its own, however
// large the harness was when it started it. (Linux keeps getrusage's
// maximum RSS across exec, and Go starts children with vfork: the child
// reported the harness's peak, and a curve's later points 580 MB where
// they used 325.)
func TestChildPeakRSSIsItsOwn(t *testing.T) {
	big := make([]byte, 400<<20)
	for i := 0; i < len(big); i += 4096 {
		big[i] = 1
	}
	c, err := startChild(TargetBridge, 10, 2, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runtime.KeepAlive(big)
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.MaxRSSBytes <= 0 || st.MaxRSSBytes > 200<<20 {
		t.Fatalf("a child serving 10 services reports a peak RSS of %d MB (the harness holds 400 MB): want its own, under 200 MB", st.MaxRSSBytes>>20)
	}
	t.Logf("child peak RSS %d MB, the harness holding 400 MB", st.MaxRSSBytes>>20)
}
