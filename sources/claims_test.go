package sources

import (
	"context"
	"reflect"
	"testing"
)

func TestClaimBeforePriorityThenConfigOrder(t *testing.T) {
	order := []string{"consul", "dns", "file"}
	for _, c := range []struct {
		a, b     string
		priority map[string]int
		want     bool
	}{
		{"consul", "dns", nil, true},                        // listed first
		{"dns", "consul", nil, false},                       // listed second
		{"dns", "consul", map[string]int{"dns": 1}, true},   // higher priority wins over order
		{"consul", "dns", map[string]int{"dns": 1}, false},  //
		{"file", "dns", map[string]int{"consul": 5}, false}, // equal priorities: order
		{"dns", "file", map[string]int{"file": -1}, true},   // negative priority ranks below 0
		{"file", "gone", nil, true},                         // an unlisted source ranks after the listed
		{"gone", "other", nil, true},                        // two unlisted: by name
		{"dns", "dns", map[string]int{"dns": 3}, false},     // never before itself
		{"consul", "file", map[string]int{"file": 0}, true}, // an explicit 0 is the default
		{"file", "consul", map[string]int{"file": 2, "consul": 1}, true},
	} {
		if got := ClaimBefore(c.a, c.b, order, c.priority); got != c.want {
			t.Errorf("ClaimBefore(%s, %s, priority %v) = %v, want %v", c.a, c.b, c.priority, got, c.want)
		}
	}
}

func TestStaticConflictsRanked(t *testing.T) {
	srcs := []Source{fakeClaimer{"a", []string{"x", "y", "z"}}, fakeClaimer{"b", []string{"y"}}, fakeClaimer{"c", []string{"z", "y"}}}
	got, err := StaticConflicts(srcs, map[string]int{"c": 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []Conflict{{Service: "y", Sources: []string{"c", "a", "b"}}, {Service: "z", Sources: []string{"c", "a"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("conflicts = %+v, want %+v", got, want)
	}
	got, err = StaticConflicts(srcs[:1], nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("one source: %+v, %v", got, err)
	}
}

type fakeClaimer struct {
	name  string
	names []string
}

func (c fakeClaimer) Name() string                    { return c.name }
func (c fakeClaimer) Run(context.Context, Sink) error { return nil }
func (c fakeClaimer) ClaimedNames() ([]string, error) { return c.names, nil }
