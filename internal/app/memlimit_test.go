package app

import (
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/xdsbridge/xdsbridge/config"
)

// memory_limit from the config file: a size sets the runtime's soft limit
// and the gauge; a bad value fails New naming the field.
func TestMemoryLimitConfig(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set: it wins over memory_limit")
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	debug.SetMemoryLimit(math.MaxInt64)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "services.yaml"), []byte("services: {}\n"), 0o644)
	cfg, err := config.Parse([]byte("memory_limit: 700MiB\nsources: [{name: s, file: {path: services.yaml}}]\n"), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	got := debug.SetMemoryLimit(-1)
	gauge := memoryLimitGauge(t, a)
	t.Logf("runtime limit %d, gauge %.0f", got, gauge)
	if got != 700<<20 || gauge != 700<<20 {
		t.Fatalf("runtime limit %d, gauge %.0f; want %d", got, gauge, 700<<20)
	}

	cfg.MemoryLimit = "lots"
	if _, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "memory_limit:") {
		t.Fatalf("New with memory_limit lots: %v", err)
	}
}

// memoryLimitGauge is xdsbridge_memory_limit_bytes as the app's registry gathers it.
func memoryLimitGauge(t *testing.T, a *App) float64 {
	t.Helper()
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "xdsbridge_memory_limit_bytes" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no xdsbridge_memory_limit_bytes")
	return 0
}
