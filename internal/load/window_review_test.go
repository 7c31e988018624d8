package load

import (
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// TestRunRejectsWindowOutOfRange: a DeltaWindow grpc-go cannot advertise
// (under HTTP/2's initial 65,535 bytes, which grpc-go ignores while still
// turning its bandwidth-delay estimate off; over 2^31-1, which int32 wraps)
// is refused, not run with a static 64 KiB window that the report calls
// something else.
func TestRunRejectsWindowOutOfRange(t *testing.T) {
	for _, w := range []int{-1, 1000, 65534, math.MaxInt32 + 1, 1 << 32} {
		sc := Scenario{Name: "window", Services: 2, Endpoints: 1, Clients: 2,
			InProcess: true, Targets: []string{TargetBridge}, Timeout: 20 * time.Second, DeltaWindow: w}
		_, err := Run(sc, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "window") {
			t.Errorf("DeltaWindow %d: err %v, want it refused", w, err)
		}
	}
}
