package policy

import (
	"strings"
	"testing"
)

func TestCompileFilter(t *testing.T) {
	for _, c := range []struct {
		expr string
		err  string // substring; "" for none
	}{
		{`Service.Meta.version == v1`, ""},
		{`"canary" in Service.Tags and Node.Meta.rack != r1`, ""},
		{`Service.Meta["app.kubernetes.io/name"] == web or not (Health == UNHEALTHY)`, ""},
		{`Metadata.envoy.lb.canary == true`, ""},
		{`Locality.Zone matches "^eu-"`, ""},
		{`any Service.Tags as t { t == "v1" }`, ""},
		{`all Service.Meta as k, v { v != "" }`, ""},
		{`Port == 8080 and Address not matches "^10\\."`, ""},
		{`Service.Tags is not empty`, ""},
		{`Service.Tags contains`, "Service.Tags contains"},
		{`(Service.ID == a`, "Service.ID"},
		{`Tags contains v1`, `unknown selector "Tags"`},
		{`any Service.Tags as t { u == "v1" }`, `unknown selector "u"`},
		{`Service.Meta.version == v1 or Nodes.Node == n`, `unknown selector "Nodes.Node"`},
		{strings.Repeat("Port == 1 or ", 300) + "Port == 1", ""},
		{strings.Repeat("x", MaxFilterBytes+1), "at most 4096"},
	} {
		_, err := CompileFilter(c.expr)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%.60q: %v", c.expr, err)
		case c.err != "" && err == nil:
			t.Errorf("%.60q: compiled; want an error with %q", c.expr, c.err)
		case c.err != "" && !strings.Contains(err.Error(), c.err):
			t.Errorf("%.60q: error %q; want %q in it", c.expr, err, c.err)
		}
	}
}

// Check reports a filter that does not compile at subsets.<name>.filter.
func TestCheckSubsetFilter(t *testing.T) {
	s := Service{Subsets: map[string]Subset{
		"good": {Filter: `"v1" in Service.Tags`},
		"bad":  {Filter: `Service.Tags contains`},
		"typo": {Filter: `Service.Tags contains v1 and Sevrice.ID == x`},
	}}
	errs := s.Check("services", "web")
	var got []string
	for _, e := range errs {
		got = append(got, FieldPath(e.Path))
	}
	want := []string{"services.web.subsets.bad.filter", "services.web.subsets.typo.filter"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("paths %q; want %q (errors %v)", got, want, errs)
	}
}
