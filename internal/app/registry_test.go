package app

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/config"
)

// The registry is read through functions: the names are a copy, every
// name has a factory, and an unknown type is an error, not a nil factory.
func TestSourceTypeRegistry(t *testing.T) {
	names := SourceTypeNames()
	if want := []string{"consul", "dns", "file", "policy_file"}; !slices.Equal(names, want) {
		t.Fatalf("SourceTypeNames() = %v, want %v", names, want)
	}
	for _, n := range names {
		if f, ok := SourceType(n); !ok || f == nil {
			t.Errorf("SourceType(%q) = %v, %v", n, f, ok)
		}
	}
	names[0] = "changed"
	if SourceTypeNames()[0] != "consul" {
		t.Error("SourceTypeNames returns the registry's own slice")
	}
	if f, ok := SourceType("bogus"); ok || f != nil {
		t.Errorf("SourceType(bogus) = %v, %v", f, ok)
	}
	// A config built in code (not through config.Parse, which checks the
	// types) with an unknown type: an error naming it.
	c := &config.Config{Sources: []config.Source{{Name: "x", Type: "bogus"}}}
	_, err := BuildSources(c, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err == nil || !strings.Contains(err.Error(), `sources[0] (x): unknown source type "bogus"`) {
		t.Errorf("BuildSources: %v", err)
	}
}
