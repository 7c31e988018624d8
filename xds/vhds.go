package xds

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// Virtual host discovery (VHDS) for one route configuration, the egress
// table: delta clients get it as a RouteConfiguration without virtual
// hosts (its "stub", whose vhds field points at ADS) and fetch each
// virtual host on demand as a VirtualHost resource; sotw and REST
// clients keep getting the whole table.
//
// The store keeps the whole table under its name, for sotw clients, and
// the stub under stubName; a delta stream's requests for the table's name
// are read as requests for the stub, and the stub goes out under the
// table's name (vhdsStream.toStub, sending). VirtualHost resources are not in the store:
// the vhdsTable holds them, split from each table published, and each
// delta stream's vhdsStream what it subscribed to and holds.
//
// Envoy asks for "<table>/<Host>" (its Host header, lower-cased, port
// included), an alias: the answer is the virtual host whose domains match
// that Host as Envoy matches them (exact, then the longest suffix
// wildcard, then the longest prefix wildcard), under its own name
// "<table>/<service>" with the aliases it was asked by, or, when no
// virtual host matches, the alias alone without a resource, so that Envoy
// answers the request 404 at once instead of holding it. A subscription
// stays: when the table changes, a stream is sent the virtual hosts it
// holds that changed, the names of those gone (removed_resources), and
// those its aliases now resolve to; a stream that holds none of
// what changed is sent nothing.
//
// The hooks in the delta stream handler (deltaserver.go): processDelta
// opens and closes a stream's vhdsStream, whose pump puts wake-ups on the
// stream's queue (deltaQueue); request hands VirtualHost
// requests to vhdsRequest and renames route subscriptions (vhdsStream.
// toStub); send renames the stub back (vhdsStream.sending); process hands
// a wake-up to vhdsWoken. PublishServices calls vhdsPublish; visibility.
// sees (authorize.go) reads the stub's name as the table's.

// VirtualHostType is the type URL of VHDS resources.
const VirtualHostType = resource.VirtualHostType

// VHDSSplit makes, of a table as published, the stub delta clients get
// and the VirtualHost resources, each named "<table>/<service>".
type VHDSSplit func(table *route.RouteConfiguration) (stub *route.RouteConfiguration, hosts []*route.VirtualHost, err error)

// VHDSOptions configure ServeVHDS.
type VHDSOptions struct {
	// RouteConfigName is the table's name.
	RouteConfigName string
	Split           VHDSSplit
	// Metrics is where the counters are registered; nil for none.
	Metrics prometheus.Registerer
}

// ServeVHDS serves the route configuration opts.RouteConfigName over
// VHDS to delta clients. Call it before serving and before the table is
// first published.
func (c *Cache) ServeVHDS(opts VHDSOptions) error {
	if opts.RouteConfigName == "" || opts.Split == nil {
		return errors.New("xds: ServeVHDS needs a route configuration name and a split")
	}
	t := &vhdsTable{
		name:     opts.RouteConfigName,
		stubName: translate.VHDSStubName(opts.RouteConfigName),
		prefix:   opts.RouteConfigName + "/",
		split:    opts.Split,
		hosts:    map[string]*vhdsHost{},
		streams:  map[*vhdsStream]struct{}{},
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_vhds_resources_sent_total",
			Help: "VHDS answers sent to delta clients, by kind: host (a virtual host), unresolved (an alias no virtual host matches, answered without a resource), removed (a virtual host gone).",
		}, []string{"kind"}),
	}
	t.hostsGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "xdsbridge_vhds_virtual_hosts",
		Help: "Virtual hosts served over VHDS (the egress table's services).",
	}, func() float64 { t.mu.Lock(); defer t.mu.Unlock(); return float64(len(t.hosts)) })
	if err := promreg.Register(opts.Metrics, t.sent, t.hostsGauge); err != nil {
		return err
	}
	c.vhds.Store(t)
	return nil
}

// vhdsTable is the table's virtual hosts as served over VHDS, and the
// streams subscribed.
type vhdsTable struct {
	name, stubName, prefix string
	split                  VHDSSplit

	sent       *prometheus.CounterVec
	hostsGauge prometheus.GaugeFunc

	mu    sync.Mutex
	hosts map[string]*vhdsHost // by resource name
	// exact, suffixes and prefixes index the hosts' domains (lower-cased;
	// suffix and prefix without their '*') by the resource name.
	exact, suffixes, prefixes map[string]string
	streams                   map[*vhdsStream]struct{}
}

// vhdsHost is one VirtualHost resource.
type vhdsHost struct {
	name    string
	version string
	msg     *route.VirtualHost
	any     *anypb.Any
}

// vhdsPublish takes the routes of a publication: the table's is split
// into its stub (added to routes, under stubName) and its virtual hosts,
// which replace the served ones when the returned function is called,
// once the publication is applied.
// c.pubMu is held.
func (c *Cache) vhdsPublish(routes []store.Resource) ([]store.Resource, func()) {
	t := c.vhds.Load()
	if t == nil {
		return routes, func() {}
	}
	i := slices.IndexFunc(routes, func(r store.Resource) bool { return r.Name == t.name })
	if i < 0 {
		return routes, func() {}
	}
	rc, _ := routes[i].Msg.(*route.RouteConfiguration)
	stub, hosts, err := t.split(rc)
	if err != nil {
		// Not bad input: every virtual host passed validation in the
		// table. The served ones stay.
		return routes, func() {}
	}
	routes = append(slices.Clone(routes), store.Resource{Name: t.stubName, Msg: stub})
	return routes, func() { t.replace(hosts) }
}

// replace makes hosts the virtual hosts served and tells each stream that
// holds or asked for one that changed.
func (t *vhdsTable) replace(hosts []*route.VirtualHost) {
	next := make(map[string]*vhdsHost, len(hosts))
	exact, suffix, prefix := map[string]string{}, map[string]string{}, map[string]string{}
	t.mu.Lock()
	var changed []string
	domainsChanged := false
	for _, vh := range hosts {
		name := vh.GetName()
		old := t.hosts[name]
		if old != nil && proto.Equal(old.msg, vh) {
			next[name] = old
		} else {
			// A host added, or its domains changed: an alias that
			// resolved to nothing may resolve now.
			domainsChanged = domainsChanged || old == nil || !slices.Equal(old.msg.GetDomains(), vh.GetDomains())
			a, err := anypb.New(vh)
			if err != nil {
				continue
			}
			next[name] = &vhdsHost{name: name, version: hashVersion(a.GetValue()), msg: vh, any: a}
			changed = append(changed, name)
		}
		for _, d := range vh.GetDomains() {
			d = strings.ToLower(d)
			switch {
			case d == "*":
			case strings.HasPrefix(d, "*"):
				suffix[d[1:]] = name
			case strings.HasSuffix(d, "*"):
				prefix[d[:len(d)-1]] = name
			default:
				exact[d] = name
			}
		}
	}
	for name := range t.hosts {
		if next[name] == nil {
			changed = append(changed, name)
		}
	}
	t.hosts, t.exact, t.suffixes, t.prefixes = next, exact, suffix, prefix
	streams := make([]*vhdsStream, 0, len(t.streams))
	for s := range t.streams {
		streams = append(streams, s)
	}
	t.mu.Unlock()
	if len(changed) == 0 {
		return
	}
	for _, s := range streams {
		s.tableChanged(changed, domainsChanged)
	}
}

// resolve is the resource name of the virtual host a Host header (lower-
// cased) reaches, as Envoy matches domains: exactly, then by the longest
// suffix wildcard, then by the longest prefix wildcard; "" when none.
// t.mu is held.
func (t *vhdsTable) resolve(host string) string {
	if n, ok := t.exact[host]; ok {
		return n
	}
	for i := 1; i < len(host); i++ {
		if n, ok := t.suffixes[host[i:]]; ok {
			return n
		}
	}
	for l := len(host) - 1; l >= 0; l-- {
		if n, ok := t.prefixes[host[:l]]; ok {
			return n
		}
	}
	return ""
}

// hashVersion is a resource version of an encoding.
func hashVersion(b []byte) string {
	var h uint64 = 14695981039346656037
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return fmt.Sprintf("%016x", h)
}
