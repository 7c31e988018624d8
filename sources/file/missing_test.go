package file

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/internal/logbuf"
	"github.com/xdsbridge/xdsbridge/sources"
)

// A services file that does not exist at start is a config warning naming
// its absolute path, and the log does not claim a last valid content the
// source never had; once it had one, losing the file keeps it, and the
// log says so.
func TestMissingFileWarnsWithItsPath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("conf", 0o755); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	raw, _ := json.Marshal(map[string]any{"path": "services.yaml", "settle": "10ms"})
	s, err := New("static", raw, sources.Env{BaseDir: "conf", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	src := s.(*Source)
	abs := filepath.Join(dir, "conf", "services.yaml")
	want := "services file " + abs + " does not exist (yet): it may appear later; until it does, this source serves nothing and the bridge is not ready"
	if got := src.ConfigWarnings(); len(got) != 1 || got[0] != want {
		t.Errorf("ConfigWarnings() = %q; want [%q]", got, want)
	}
	sink := run(t, src)
	errorsAtLeast(t, sink, 1)
	if l := logs.String(); !strings.Contains(l, `msg="services file does not exist (yet); nothing is served from this source until it appears"`) || strings.Contains(l, "last valid content") {
		t.Errorf("log without the file:\n%s", l)
	}
	write(t, abs, doc("10.0.0.1"))
	lastIs(t, sink, "10.0.0.1")
	if got := src.ConfigWarnings(); len(got) != 0 {
		t.Errorf("ConfigWarnings() with the file = %q; want none", got)
	}
	if err := os.Remove(abs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(logs.String(), "rejected; serving its last valid content") {
		if time.Now().After(deadline) {
			t.Fatalf("no log of the last valid content kept:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
