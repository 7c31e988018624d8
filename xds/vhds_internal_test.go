package xds

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/translate"
)

// vhdsTestStream is a stream of a cache serving VHDS for the table "eg"
// of services api and web (web with the policy domains "*.web.example"
// and "web-*"), that was sent its route configuration.
func vhdsTestStream(t *testing.T) (*Cache, *vhdsStream, chan *deltaResponse) {
	t.Helper()
	c := NewCache()
	e := translate.Egress{RouteConfigName: "eg", VHDS: true}.WithDefaults()
	if err := c.ServeVHDS(VHDSOptions{RouteConfigName: "eg", Split: e.VHDSSplit}); err != nil {
		t.Fatal(err)
	}
	vhdsTestPublish(t, c, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan *deltaResponse, 4)
	s := c.vhdsOpen(ctx, deltaQueue{ch: ch})
	t.Cleanup(func() { s.close(); cancel() })
	s.sending(&discovery.DeltaDiscoveryResponse{TypeUrl: RouteType, Resources: []*discovery.Resource{{Name: translate.VHDSStubName("eg")}}})
	// The stub was sent: the stream's pump may hand it a wake-up.
	select {
	case <-ch:
	default:
	}
	return c, s, ch
}

// vhdsTestPublish publishes the table "eg" of api (with apiRoute, if not
// nil), web and more.
func vhdsTestPublish(t *testing.T, c *Cache, apiRoute *route.RouteConfiguration, more ...string) {
	t.Helper()
	e := translate.Egress{RouteConfigName: "eg", VHDS: true}.WithDefaults()
	web := translate.RouteConfig("web")
	web.VirtualHosts[0].Domains = append(web.VirtualHosts[0].Domains, "*.web.example", "web-*")
	svcs := []translate.EgressService{{Name: "api", Route: apiRoute}, {Name: "web", Route: web}}
	for _, m := range more {
		svcs = append(svcs, translate.EgressService{Name: m})
	}
	rc, _ := e.RouteTable(svcs)
	if err := c.PublishServices([]translate.Resources{{Route: rc}}, nil); err != nil {
		t.Fatal(err)
	}
}

// ask subscribes s to aliases and returns its next response.
func (s *vhdsStream) ask(aliases ...string) *discovery.DeltaDiscoveryResponse {
	s.request(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: aliases}, false)
	return s.next()
}

// TestVHDSResolveAsEnvoyMatches: a Host finds the virtual host Envoy's
// matching would give it: an exact domain, then the longest suffix
// wildcard, then the longest prefix wildcard ("api:*" for a Host with a
// port); a wildcard matches at least one character.
func TestVHDSResolveAsEnvoyMatches(t *testing.T) {
	_, s, _ := vhdsTestStream(t)
	tb := s.t
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for host, want := range map[string]string{
		"api":                     "eg/api",
		"api:8080":                "eg/api",
		"api.service.consul":      "eg/api",
		"api.service.consul:443":  "eg/api",
		"a.web.example":           "eg/web",
		"web-canary":              "eg/web",
		"web":                     "eg/web",
		".web.example":            "",
		"web.example":             "",
		"web-":                    "",
		"api:":                    "",
		"apix":                    "",
		"":                        "",
		"nosuch.service.consul:1": "",
	} {
		if got := tb.resolve(host); got != want {
			t.Errorf("Host %q: %q, want %q", host, got, want)
		}
	}
}

// TestVHDSUnresolvedWaitForDomains: a stream holding a host name no
// service has is woken by a table change that adds a host (and is then
// sent it), not by one that changes only routes.
func TestVHDSUnresolvedWaitForDomains(t *testing.T) {
	c, s, ch := vhdsTestStream(t)
	if got := answerNames(s.ask("eg/a")); !slices.Equal(got, []string{"eg/a"}) {
		t.Fatalf("answered %v, want eg/a without a resource", got)
	}
	woken := func() bool {
		select {
		case r := <-ch:
			return r == vhdsWakeResponse
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}
	api := translate.RouteConfig("api")
	api.VirtualHosts[0].Routes[0].GetRoute().PrefixRewrite = "/v2/"
	vhdsTestPublish(t, c, api)
	if woken() {
		t.Fatal("woken by a change to api's routes")
	}
	vhdsTestPublish(t, c, api, "a")
	if !woken() {
		t.Fatal("not woken when a was added")
	}
	r := s.next()
	if got := answerNames(r); !slices.Equal(got, []string{"eg/a"}) || r.Resources[0].Resource == nil {
		t.Fatalf("after a was added: sent %v, want a's virtual host", r)
	}
}

// TestVHDSVisibility: a client that may not read a service is answered
// as if no virtual host had its host; one that may read the table may
// read its stub.
func TestVHDSVisibility(t *testing.T) {
	_, s, _ := vhdsTestStream(t)
	vis := &visibility{patterns: []string{"api", "eg"}}
	if !vis.sees(translate.VHDSStubName("eg")) {
		t.Fatal("a client that may read the table may not read its stub")
	}
	s.setVisibility(vis)
	r := s.ask("eg/api", "eg/web")
	for _, res := range r.GetResources() {
		if (res.Name == "eg/api") != (res.Resource != nil) {
			t.Errorf("%s: resource %v; want api's virtual host only", res.Name, res.Resource != nil)
		}
	}
	if got := answerNames(r); !slices.Equal(got, []string{"eg/api", "eg/web"}) {
		t.Fatalf("answered %v", got)
	}
}

func answerNames(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.Name)
	}
	slices.Sort(out)
	return out
}

// FuzzVHDSAliases: whatever names a client subscribes to, each answer is
// a virtual host whose aliases include a name asked for, or a name asked
// for alone without a resource; no name is both sent and removed.
func FuzzVHDSAliases(f *testing.F) {
	for _, s := range []string{"eg/api", "eg/API:80", "eg/", "eg", "eg/a.web.example", "eg/web-", "other/api", "eg/\x00", "*"} {
		f.Add(s, "eg/web")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		_, s, _ := vhdsTestStream(t)
		asked := []string{a, b}
		r := s.ask(asked...)
		if r == nil {
			return
		}
		for _, res := range r.Resources {
			if slices.Contains(r.RemovedResources, res.Name) {
				t.Fatalf("%s both sent and removed", res.Name)
			}
			if res.Resource == nil {
				if !slices.Contains(asked, res.Name) || !slices.Equal(res.Aliases, []string{res.Name}) {
					t.Fatalf("unresolved answer %v for %q", res, asked)
				}
				continue
			}
			var vh route.VirtualHost
			if err := res.Resource.UnmarshalTo(&vh); err != nil || vh.GetName() != res.Name || !strings.HasPrefix(res.Name, "eg/") {
				t.Fatalf("answer %v (%v)", res, err)
			}
			if !slices.ContainsFunc(res.Aliases, func(x string) bool { return slices.Contains(asked, x) }) {
				t.Fatalf("%s answered with aliases %v, none asked for (%q)", res.Name, res.Aliases, asked)
			}
		}
	})
}

// TestVHDSInitialVersionsOfHiddenHost: a client that may not read a
// service is not sent its virtual host because it claims, in its first
// request's initial_resource_versions, to hold a version of it; the claim
// is answered as removed.
func TestVHDSInitialVersionsOfHiddenHost(t *testing.T) {
	_, s, _ := vhdsTestStream(t)
	s.setVisibility(&visibility{patterns: []string{"api", "eg"}})
	s.request(&discovery.DeltaDiscoveryRequest{InitialResourceVersions: map[string]string{"eg/web": "stale"}}, true)
	r := s.next()
	for _, res := range r.GetResources() {
		if res.Resource != nil {
			t.Errorf("sent %s's virtual host to a client that may not read it", res.Name)
		}
	}
	if !slices.Contains(r.GetRemovedResources(), "eg/web") {
		t.Errorf("removed %v, want eg/web", r.GetRemovedResources())
	}
}

// TestVHDSAliasMovesToMoreSpecificHost: a stream whose alias resolves to
// a virtual host through a wildcard domain is woken, and sent the new
// host, when a host with that exact domain is added: Envoy routes the
// Host as the table now says, as a sotw client of the whole table does.
func TestVHDSAliasMovesToMoreSpecificHost(t *testing.T) {
	c, s, ch := vhdsTestStream(t)
	if r := s.ask("eg/a.web.example"); !slices.Equal(answerNames(r), []string{"eg/web"}) {
		t.Fatalf("a.web.example answered %v, want eg/web", answerNames(r))
	}
	vhdsTestPublish(t, c, nil, "a.web.example")
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("not woken when a host with the alias's exact domain was added")
	}
	r := s.next()
	if i := slices.IndexFunc(r.GetResources(), func(res *discovery.Resource) bool {
		return slices.Contains(res.Aliases, "eg/a.web.example")
	}); i < 0 || r.Resources[i].Name != "eg/a.web.example" {
		t.Fatalf("after a.web.example was added: sent %v, want eg/a.web.example for the alias", r)
	}
}
