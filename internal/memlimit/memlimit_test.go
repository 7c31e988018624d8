package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func noEnv(string) string { return "" }

func TestApplyFromFakeCgroup(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	cases := []struct {
		name, file, content string
		want                int64 // soft limit set; 0: none
		source              string
	}{
		{"v2 limit", "memory.max", "536870912\n", 483183820, "cgroup"},
		{"v2 unlimited", "memory.max", "max\n", 0, "none"},
		{"v1 limit", "memory/memory.limit_in_bytes", "1073741824\n", 966367641, "cgroup"},
		{"v1 unlimited", "memory/memory.limit_in_bytes", "9223372036854771712\n", 0, "none"},
		{"no cgroup", "other", "1", 0, "none"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			root := t.TempDir()
			writeFile(t, filepath.Join(root, c.file), c.content)
			r := Apply(Setting{Auto: true}, root, noEnv)
			got := debug.SetMemoryLimit(-1)
			t.Logf("%s: result %+v, runtime limit %d", c.name, r, got)
			if r.Limit != c.want || r.Source != c.source {
				t.Fatalf("Apply = %+v, want limit %d source %s", r, c.want, c.source)
			}
			wantRuntime := c.want
			if wantRuntime == 0 {
				wantRuntime = math.MaxInt64
			}
			if got != wantRuntime {
				t.Fatalf("runtime memory limit %d, want %d", got, wantRuntime)
			}
		})
	}
}

func TestApplyConfigEnvOff(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "memory.max"), "536870912\n")

	debug.SetMemoryLimit(math.MaxInt64)
	if r := Apply(Setting{Bytes: 300 << 20}, root, noEnv); r.Limit != 300<<20 || r.Source != "config" || debug.SetMemoryLimit(-1) != 300<<20 {
		t.Fatalf("explicit size: %+v", r)
	}
	// GOMEMLIMIT set: the runtime's limit (from the environment) is kept.
	debug.SetMemoryLimit(123 << 20)
	env := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "123MiB"
		}
		return ""
	}
	if r := Apply(Setting{Auto: true}, root, env); r.Source != "env" || r.Limit != 123<<20 || debug.SetMemoryLimit(-1) != 123<<20 {
		t.Fatalf("GOMEMLIMIT: %+v", r)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if r := Apply(Setting{}, root, noEnv); r.Source != "off" || r.Limit != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("off: %+v", r)
	}
}

func TestParse(t *testing.T) {
	good := map[string]Setting{
		"": {Auto: true}, "auto": {Auto: true}, "AUTO": {Auto: true}, "off": {},
		"512MiB": {Bytes: 512 << 20}, "1GiB": {Bytes: 1 << 30}, "1.5GiB": {Bytes: 3 << 29},
		"536870912": {Bytes: 536870912}, "600MB": {Bytes: 600e6}, "2g": {Bytes: 2 << 30},
	}
	for in, want := range good {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"lots", "-5MiB", "1MiB", "12XB", "1e30GiB"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", in, got)
		}
	}
}
