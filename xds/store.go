package xds

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// The store: resources as served, their versions and the change log.

// Resource is one named resource to publish.
type Resource struct {
	Name string
	Msg  proto.Message
	// DependsOn, when set, names a resource of another type (an EDS
	// resource's cluster) whose version is folded into this one's, so that a
	// change to the cluster re-sends this resource too: a cluster updated by
	// CDS warms only once Envoy receives its ClusterLoadAssignment again.
	DependsOn *Dep
}

// Dep names a resource of another type.
type Dep struct {
	TypeURL string
	Name    string
}

// Change is one step of an update: resources to add or replace, and names
// to remove, of one type.
type Change struct {
	TypeURL string
	Upserts []Resource
	Deletes []string
}

// entry is a resource as served: marshaled once, shared by every response.
type entry struct {
	name     string
	base     string // hash of the deterministic encoding
	version  string // base folded with the dependency's version
	dep      *Dep
	msg      proto.Message
	any      *anypb.Any
	delta    *discovery.Resource
	verHash  uint64 // hash of (name, version), for the type's aggregate version
	byteSize int
	// deltaSize, anySize: what the resource adds to an encoded delta
	// response (its Resource: name, version, the Any) and to a sotw one
	// (the Any), with the field's tag and length: the bound of a response
	// (WithMaxResponseBytes) counts these.
	deltaSize, anySize int
	gen                uint64 // the type generation that committed this version
	// clusters: of a RouteConfiguration, the clusters its routes name
	// (sorted; see routehold.go).
	clusters []string
}

// The change log is how much history of a type the cache keeps, so that an
// ACK only needs to look at what changed since its response. A delta client
// whose state is older than the log gets a full check (a wildcard one has
// its stream reset and reconnects with its versions).
const (
	maxLogGens  = 4096
	maxLogNames = 1 << 18
)

type typeState struct {
	url       string
	order     int  // rank in updateOrder: CDS, EDS, LDS, RDS, then others
	fullState bool // sotw responses carry every subscribed resource (CDS, LDS)
	resources map[string]*entry
	aggregate uint64 // XOR of entries' verHash: the sotw version_info
	gen       uint64
	log       []genChange // recent generations, oldest first
	logNames  int         // names in log
	floor     uint64      // changes at or before this generation are forgotten
	deletedAt map[string]uint64
	// names: the resource names sorted, while no name comes or goes
	// (sortednames.go); nil: to be built.
	names *sortedNames
	// grave: clusters deleted, as last served, while their deletion is in
	// the change log (mbb.go: a stream may be sent one a little longer).
	grave map[string]*entry

	// watches are the type's open watches. A change is offered to each:
	// checking a watch's interest in the changed names costs a few map
	// lookups per name, while an index by name would have to be rebuilt
	// under every subscribed name on every ACK (5,000 names for an Envoy
	// with 5,000 clusters).
	watches map[*watch]struct{}
}

type genChange struct {
	gen   uint64
	names []string
	at    time.Time // when committed (change → ACK latency, syncstatus.go)
}

// Apply performs the changes in order, notifying watches after each step, so
// that on an ordered ADS stream a client receives the steps in that order
// (make before break: clusters, then endpoints, then removals). Resources
// that depend on a changed resource (an EDS resource on its cluster) are
// re-versioned and sent with the next step of their own type, or at the end.
func (c *Cache) Apply(changes ...Change) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pendingDeps := map[*typeState][]string{}
	// On an error, the steps before the failing one stay applied and
	// committed (with the dependents they re-versioned); nothing of the
	// failing step is stored.
	flushDeps := func() {
		for _, ts := range slices.SortedFunc(maps.Keys(pendingDeps), typeOrder) {
			c.commit(ts, c.reversion(ts, pendingDeps[ts]))
		}
	}
	for _, ch := range changes {
		ts, ok := c.types[ch.TypeURL]
		if !ok {
			flushDeps()
			return fmt.Errorf("xds cache: type %s is not served", ch.TypeURL)
		}
		entries := make([]*entry, 0, len(ch.Upserts))
		for _, r := range ch.Upserts {
			if old, ok := ts.resources[r.Name]; ok && sameDep(old.dep, r.DependsOn) && proto.Equal(old.msg, r.Msg) {
				continue // unchanged: not encoded again
			}
			e, err := c.newEntry(ch.TypeURL, r)
			if err != nil {
				flushDeps()
				return err
			}
			entries = append(entries, e)
		}
		changed := make([]string, 0, len(entries)+len(ch.Deletes))
		for _, e := range entries {
			if old, ok := ts.resources[e.name]; ok && old.version == e.version {
				continue
			}
			c.put(ts, e)
			changed = append(changed, e.name)
		}
		for _, n := range ch.Deletes {
			if old, ok := ts.resources[n]; ok {
				ts.aggregate ^= old.verHash
				delete(ts.resources, n)
				ts.names = nil
				if ts.url == ClusterType {
					ts.grave[n] = old // see mbb.go
				}
				changed = append(changed, n)
			}
		}
		if deps := pendingDeps[ts]; len(deps) > 0 {
			changed = append(changed, c.reversion(ts, deps)...)
			delete(pendingDeps, ts)
		}
		c.markDependents(ts, changed, pendingDeps)
		c.commit(ts, changed)
	}
	flushDeps()
	return nil
}

func sameDep(a, b *Dep) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func (c *Cache) put(ts *typeState, e *entry) {
	if old, ok := ts.resources[e.name]; ok {
		ts.aggregate ^= old.verHash
		// Every version of a resource keeps its first name string, the
		// one the decoder hands out (wireindex.go) and the subscription
		// sets keep: equal names at one address compare without being
		// read.
		e.name = old.name
	} else {
		ts.names = nil
	}
	ts.resources[e.name] = e
	ts.aggregate ^= e.verHash
	delete(ts.grave, e.name)
}

// markDependents notes, per other type, the names whose resources may depend
// on the changed resources of ts.
func (c *Cache) markDependents(ts *typeState, changed []string, pending map[*typeState][]string) {
	for _, other := range c.types {
		if other == ts {
			continue
		}
		for _, n := range changed {
			if e, ok := other.resources[n]; ok && e.dep != nil && e.dep.TypeURL == ts.url && e.dep.Name == n {
				pending[other] = append(pending[other], n)
			}
		}
	}
}

// reversion recomputes the versions of the named resources of ts from their
// dependencies and returns the names whose version changed.
func (c *Cache) reversion(ts *typeState, names []string) []string {
	var touched []string
	for _, n := range names {
		e, ok := ts.resources[n]
		if !ok {
			continue
		}
		v := foldVersion(e.base, c.depVersion(e.dep))
		if v == e.version {
			continue
		}
		ne := *e
		ne.version = v
		ne.delta = &discovery.Resource{Name: e.name, Version: v, Resource: e.any}
		ne.sizes()
		ne.verHash = verHash(e.name, v)
		c.put(ts, &ne)
		touched = append(touched, n)
	}
	return touched
}

func (c *Cache) depVersion(d *Dep) string {
	if d == nil {
		return ""
	}
	if ts, ok := c.types[d.TypeURL]; ok {
		if e, ok := ts.resources[d.Name]; ok {
			return e.version
		}
	}
	return ""
}

func (c *Cache) newEntry(typeURL string, r Resource) (*entry, error) {
	if r.Name == "" {
		return nil, errors.New("xds cache: resource with empty name")
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Msg)
	if err != nil {
		return nil, fmt.Errorf("xds cache: encoding %s: %w", r.Name, err)
	}
	c.marshals++
	sum := sha256.Sum256(b)
	base := hex.EncodeToString(sum[:12])
	e := &entry{
		name:     r.Name,
		base:     base,
		dep:      r.DependsOn,
		msg:      r.Msg,
		any:      &anypb.Any{TypeUrl: typeURL, Value: b},
		byteSize: len(b),
	}
	e.version = foldVersion(base, c.depVersion(r.DependsOn))
	if typeURL == RouteType {
		e.clusters = routeClusters(r.Msg)
	}
	e.delta = &discovery.Resource{Name: r.Name, Version: e.version, Resource: e.any}
	e.sizes()
	e.verHash = verHash(r.Name, e.version)
	return e, nil
}

// sizes sets deltaSize and anySize (a repeated message field of number
// below 16: one byte of tag, then the length).
func (e *entry) sizes() {
	e.deltaSize = 1 + protowire.SizeBytes(proto.Size(e.delta))
	e.anySize = 1 + protowire.SizeBytes(proto.Size(e.any))
}

func foldVersion(base, dep string) string {
	if dep == "" {
		return base
	}
	sum := sha256.Sum256([]byte(base + "/" + dep))
	return hex.EncodeToString(sum[:12])
}

func verHash(name, version string) uint64 {
	sum := sha256.Sum256([]byte(name + "\x00" + version))
	return binary.BigEndian.Uint64(sum[:8])
}

// commit records a generation for the changed names and answers the
// watches they wake.
func (c *Cache) commit(ts *typeState, changed []string) {
	if len(changed) == 0 {
		return
	}
	slices.Sort(changed)
	changed = slices.Compact(changed)
	c.wire.follow(ts, changed)
	ts.gen++
	for _, n := range changed {
		if e, ok := ts.resources[n]; ok {
			e.gen = ts.gen
		} else {
			ts.deletedAt[n] = ts.gen
		}
	}
	ts.log = append(ts.log, genChange{gen: ts.gen, names: changed, at: time.Now()})
	ts.logNames += len(changed)
	c.notifySubs()
	for len(ts.log) > 1 && (len(ts.log) > maxLogGens || ts.logNames > maxLogNames) {
		old := ts.log[0]
		for _, n := range old.names {
			if ts.deletedAt[n] == old.gen {
				delete(ts.deletedAt, n)
			}
		}
		ts.floor = old.gen
		ts.logNames -= len(old.names)
		ts.log = ts.log[1:]
	}
	for n := range ts.grave {
		if _, ok := ts.deletedAt[n]; !ok {
			delete(ts.grave, n) // forgotten with the change log
		}
	}
	if c.commitWake != nil {
		close(c.commitWake) // readers waiting for a change (read)
		c.commitWake = nil
	}
	if !c.ready {
		return
	}
	for _, w := range slices.SortedFunc(maps.Keys(ts.watches), watchOrder) {
		c.tryRespond(w, changed)
		if ts.url == ClusterType && !w.done {
			c.cdsCurrent(w) // nothing of interest changed for it
		}
	}
}

// sinceLog returns the names changed after generation gen, which must not
// be older than the log.
func (ts *typeState) sinceLog(gen uint64) []string {
	// The log is in generation order; an ACK of a recent response looks
	// at its tail only, not at up to maxLogGens entries.
	i := sort.Search(len(ts.log), func(i int) bool { return ts.log[i].gen > gen })
	var names []string
	for _, l := range ts.log[i:] {
		names = append(names, l.names...)
	}
	return names
}
