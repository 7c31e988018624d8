package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
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

// Entry is a resource as served: marshaled once, shared by every response.
type Entry struct {
	Name     string
	base     string // hash of the deterministic encoding
	Version  string // base folded with the dependency's version
	Dep      *Dep
	Msg      proto.Message
	Any      *anypb.Any
	Delta    *discovery.Resource
	Wire     []byte // Delta's encoded fields (deltawire.go); nil: not UTF-8
	VerHash  uint64 // hash of (name, version), for the type's aggregate version
	ByteSize int
	// DeltaSize, AnySize: what the resource adds to an encoded delta
	// response (its Resource: name, version, the Any) and to a sotw one
	// (the Any), with the field's tag and length: the server's bound of
	// a response counts these.
	DeltaSize, AnySize int
	Gen                uint64 // the type generation that committed this version
	// Slot: the resource's number among its type's, dense (slots.go):
	// every version of a resource has its slot, and a slot freed by a
	// deletion goes to a later new name. The request decoder marks the
	// resources a reconnecting client holds current by slot.
	Slot int32
	// Clusters: of a RouteConfiguration, the clusters its routes name
	// (sorted; routes.go): the server holds routes back until these
	// clusters' assignments were sent.
	Clusters []string
}

// The change log is how much history of a type the store keeps, so that an
// ACK only needs to look at what changed since its response. A delta client
// whose state is older than the log gets a full check (a wildcard one has
// its stream reset and reconnects with its versions).
const (
	maxLogGens  = 4096
	maxLogNames = 1 << 18
)

// Type is the store's state of one type URL. Its fields are read under
// the store's lock and written by the store only.
type Type struct {
	URL       string
	Order     int  // rank (New's rank: the server's update order), then URL
	FullState bool // sotw responses carry every subscribed resource (CDS, LDS)
	Resources map[string]*Entry
	Aggregate uint64 // XOR of entries' VerHash: the sotw version_info
	Gen       uint64
	Log       []GenChange // recent generations, oldest first
	logNames  int         // names in log
	Floor     uint64      // changes at or before this generation are forgotten
	DeletedAt map[string]uint64
	// names: the resource names sorted, while no name comes or goes
	// (sortednames.go); nil: to be built.
	names *SortedNames
	// Grave: clusters deleted, as last served, while their deletion is in
	// the change log (the server may send a stream one a little longer:
	// make before break).
	Grave map[string]*Entry
	// slots: the entries' slots (slots.go); bySlot: the entries by slot
	// (nil: a free slot), which a Cursor reads.
	slots  slots
	bySlot []*Entry
	// since: the slices SortedSince built at generation sinceAt, by the
	// generation they start after; a commit makes them stale. A fleet
	// answering the responses of one change asks for the names changed
	// after the same few generations, once per stream.
	sinceAt uint64
	since   [sinceMemo]sinceNames
	sinceN  int // since's next slot to fill, round robin
}

// sinceMemo is how many slices SortedSince keeps per type.
const sinceMemo = 4

// sinceNames is the names changed after generation gen, sorted.
type sinceNames struct {
	gen   uint64
	names []string
}

// GenChange is one generation of the change log: the names it changed.
type GenChange struct {
	Gen   uint64
	Names []string
	At    time.Time // when committed (the server's change → ACK latency)
}

// Apply performs the changes in order, committing each step (the observer
// answers the watches it wakes before the next step), so
// that on an ordered ADS stream a client receives the steps in that order
// (make before break: clusters, then endpoints, then removals). Resources
// that depend on a changed resource (an EDS resource on its cluster) are
// re-versioned and sent with the next step of their own type, or at the end.
func (s *Store) Apply(changes ...Change) error {
	var o Observer
	defer func() {
		if o != nil {
			o.Applied() // after the lock is released
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	o = s.observer
	pendingDeps := map[*Type][]string{}
	// On an error, the steps before the failing one stay applied and
	// committed (with the dependents they re-versioned); nothing of the
	// failing step is stored.
	flushDeps := func() {
		for _, ts := range slices.SortedFunc(maps.Keys(pendingDeps), TypeOrder) {
			s.commit(ts, s.reversion(ts, pendingDeps[ts]))
		}
	}
	for _, ch := range changes {
		ts, ok := s.types[ch.TypeURL]
		if !ok {
			flushDeps()
			return fmt.Errorf("xds store: type %s is not served", ch.TypeURL)
		}
		entries := make([]*Entry, 0, len(ch.Upserts))
		for _, r := range ch.Upserts {
			if old, ok := ts.Resources[r.Name]; ok && sameDep(old.Dep, r.DependsOn) && proto.Equal(old.Msg, r.Msg) {
				continue // unchanged: not encoded again
			}
			e, err := s.newEntry(ch.TypeURL, r)
			if err != nil {
				flushDeps()
				return err
			}
			entries = append(entries, e)
		}
		changed := make([]string, 0, len(entries)+len(ch.Deletes))
		for _, e := range entries {
			if old, ok := ts.Resources[e.Name]; ok && old.Version == e.Version {
				continue
			}
			s.put(ts, e)
			changed = append(changed, e.Name)
		}
		for _, n := range ch.Deletes {
			if old, ok := ts.Resources[n]; ok {
				ts.Aggregate ^= old.VerHash
				delete(ts.Resources, n)
				ts.slots.free(old.Slot)
				ts.bySlot[old.Slot] = nil
				ts.names = nil
				if ts.URL == resource.ClusterType {
					ts.Grave[n] = old // see Type.Grave
				}
				changed = append(changed, n)
			}
		}
		if deps := pendingDeps[ts]; len(deps) > 0 {
			changed = append(changed, s.reversion(ts, deps)...)
			delete(pendingDeps, ts)
		}
		s.markDependents(ts, changed, pendingDeps)
		s.commit(ts, changed)
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

func (s *Store) put(ts *Type, e *Entry) {
	if old, ok := ts.Resources[e.Name]; ok {
		ts.Aggregate ^= old.VerHash
		// Every version of a resource keeps its first name string, the
		// one the decoder hands out (wireindex.go) and the subscription
		// sets keep: equal names at one address compare without being
		// read.
		e.Name = old.Name
		e.Slot = old.Slot
	} else {
		ts.names = nil
		e.Slot = ts.slots.take()
	}
	if int(e.Slot) >= len(ts.bySlot) {
		ts.bySlot = append(ts.bySlot, make([]*Entry, int(e.Slot)+1-len(ts.bySlot))...)
	}
	ts.bySlot[e.Slot] = e
	ts.Resources[e.Name] = e
	ts.Aggregate ^= e.VerHash
	delete(ts.Grave, e.Name)
}

// markDependents notes, per other type, the names whose resources may depend
// on the changed resources of ts.
func (s *Store) markDependents(ts *Type, changed []string, pending map[*Type][]string) {
	for _, other := range s.types {
		if other == ts {
			continue
		}
		for _, n := range changed {
			if e, ok := other.Resources[n]; ok && e.Dep != nil && e.Dep.TypeURL == ts.URL && e.Dep.Name == n {
				pending[other] = append(pending[other], n)
			}
		}
	}
}

// reversion recomputes the versions of the named resources of ts from their
// dependencies and returns the names whose version changed.
func (s *Store) reversion(ts *Type, names []string) []string {
	var touched []string
	for _, n := range names {
		e, ok := ts.Resources[n]
		if !ok {
			continue
		}
		v := FoldVersion(e.base, s.depVersion(e.Dep))
		if v == e.Version {
			continue
		}
		ne := *e
		ne.Version = v
		ne.setDelta(e.Any.TypeUrl, e.Any.Value)
		ne.VerHash = NameVersionHash(e.Name, v)
		s.put(ts, &ne)
		touched = append(touched, n)
	}
	return touched
}

func (s *Store) depVersion(d *Dep) string {
	if d == nil {
		return ""
	}
	if ts, ok := s.types[d.TypeURL]; ok {
		if e, ok := ts.Resources[d.Name]; ok {
			return e.Version
		}
	}
	return ""
}

func (s *Store) newEntry(typeURL string, r Resource) (*Entry, error) {
	if r.Name == "" {
		return nil, errors.New("xds store: resource with empty name")
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Msg)
	if err != nil {
		return nil, fmt.Errorf("xds store: encoding %s: %w", r.Name, err)
	}
	s.marshals++
	sum := sha256.Sum256(b)
	base := hex.EncodeToString(sum[:12])
	e := &Entry{
		Name:     r.Name,
		base:     base,
		Dep:      r.DependsOn,
		Msg:      r.Msg,
		ByteSize: len(b),
	}
	e.Version = FoldVersion(base, s.depVersion(r.DependsOn))
	if typeURL == resource.RouteType {
		e.Clusters = RouteClusters(r.Msg)
	}
	e.setDelta(typeURL, b)
	e.VerHash = NameVersionHash(r.Name, e.Version)
	return e, nil
}

// sizes sets deltaSize and anySize (a repeated message field of number
// below 16: one byte of tag, then the length).
func (e *Entry) sizes() {
	e.DeltaSize = 1 + protowire.SizeBytes(proto.Size(e.Delta))
	e.AnySize = 1 + protowire.SizeBytes(proto.Size(e.Any))
}

// FoldVersion folds a dependency's version (dep) into a version (base).
func FoldVersion(base, dep string) string {
	if dep == "" {
		return base
	}
	sum := sha256.Sum256([]byte(base + "/" + dep))
	return hex.EncodeToString(sum[:12])
}

// NameVersionHash hashes a resource's name and version, for an aggregate
// version (XOR of these).
func NameVersionHash(name, version string) uint64 {
	sum := sha256.Sum256([]byte(name + "\x00" + version))
	return binary.BigEndian.Uint64(sum[:8])
}

// commit records a generation for the changed names and tells the
// observer (after MarkReady), which answers the watches they wake.
func (s *Store) commit(ts *Type, changed []string) {
	if len(changed) == 0 {
		return
	}
	slices.Sort(changed)
	changed = slices.Compact(changed)
	ts.Gen++
	for _, n := range changed {
		if e, ok := ts.Resources[n]; ok {
			e.Gen = ts.Gen
		} else {
			ts.DeletedAt[n] = ts.Gen
		}
	}
	s.wire.Follow(ts, changed)
	ts.Log = append(ts.Log, GenChange{Gen: ts.Gen, Names: changed, At: time.Now()})
	ts.logNames += len(changed)
	s.notifySubs()
	for len(ts.Log) > 1 && (len(ts.Log) > maxLogGens || ts.logNames > maxLogNames) {
		old := ts.Log[0]
		for _, n := range old.Names {
			if ts.DeletedAt[n] == old.Gen {
				delete(ts.DeletedAt, n)
			}
		}
		ts.Floor = old.Gen
		ts.logNames -= len(old.Names)
		ts.Log = ts.Log[1:]
	}
	for n := range ts.Grave {
		if _, ok := ts.DeletedAt[n]; !ok {
			delete(ts.Grave, n) // forgotten with the change log
		}
	}
	if s.commitWake != nil {
		close(s.commitWake) // readers waiting for a change (read)
		s.commitWake = nil
	}
	if s.ready && s.observer != nil {
		s.observer.Committed(ts, changed)
	}
}

// SortedSince returns the names changed after generation gen (which must
// not be older than the log) sorted, each once, in a slice the caller
// must not write: the log's own when they are the newest generation's
// alone (an ACK of a response the last commit came after), as the
// observer was given it (Committed); else one built once per generation
// and commit, shared by the callers until the next commit (since). Under
// the store's lock, which it writes.
func (ts *Type) SortedSince(gen uint64) []string {
	if i := len(ts.Log); i > 0 && ts.Log[i-1].Gen > gen && (i == 1 || ts.Log[i-2].Gen <= gen) {
		names := ts.Log[i-1].Names // sorted, each once (commit)
		return names[:len(names):len(names)]
	}
	if ts.sinceAt != ts.Gen {
		ts.since, ts.sinceN, ts.sinceAt = [sinceMemo]sinceNames{}, 0, ts.Gen
	}
	for _, m := range ts.since {
		if m.names != nil && m.gen == gen {
			return m.names
		}
	}
	names := ts.SinceLog(gen)
	if names == nil {
		return nil
	}
	slices.Sort(names)
	names = slices.Compact(names)
	names = names[:len(names):len(names)]
	ts.since[ts.sinceN] = sinceNames{gen, names}
	ts.sinceN = (ts.sinceN + 1) % sinceMemo
	return names
}

// SinceLog returns the names changed after generation gen, which must not
// be older than the log, in a new slice.
func (ts *Type) SinceLog(gen uint64) []string {
	// The log is in generation order; an ACK of a recent response looks
	// at its tail only, from the end: the entries after gen, whose names
	// are copied below anyway, and one more.
	i := len(ts.Log)
	for i > 0 && ts.Log[i-1].Gen > gen {
		i--
	}
	n := 0
	for _, l := range ts.Log[i:] {
		n += len(l.Names)
	}
	if n == 0 {
		return nil
	}
	// One allocation: an ACK's tail is a few entries of a name or two,
	// and appending them one by one would grow the slice at each.
	names := make([]string, 0, n)
	for _, l := range ts.Log[i:] {
		names = append(names, l.Names...)
	}
	return names
}
