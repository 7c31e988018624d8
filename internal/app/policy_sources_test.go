package app

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/consul"
)

// A Consul source with config_entries publishes services and a policy:
// the loop must wait for both from it; one without, for either.
func TestServicesAndPolicy(t *testing.T) {
	var srcs []sources.Source
	for _, c := range []struct{ name, raw string }{
		{"plain", `{}`},
		{"entries", `{"config_entries": true}`},
	} {
		s, err := consul.New(c.name, json.RawMessage(c.raw), sources.Env{})
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, s)
	}
	if d := cmp.Diff([]string{"entries"}, ServicesAndPolicy(srcs)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
