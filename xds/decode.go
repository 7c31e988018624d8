package xds

import (
	"errors"
	"unicode/utf8"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// decodeDeltaRequest decodes b into m as proto.Unmarshal does, with one
// difference in how: the names (resource_names_subscribe and
// _unsubscribe, the keys of initial_resource_versions) and the versions
// are read here, in one pass, into slices and a map made at their size,
// and a name or version the store serves is the store's string (x, see
// store/wireindex.go; nil: copies), not a copy. The protobuf runtime decodes a
// map field through reflection, one entry at a time, into a map that grows
// as it goes, and copies every string; an Envoy reconnecting with 5,000
// clusters sends 5,000 names and two maps of 5,000 entries, and in a
// reconnect storm of 1,000 Envoys that decoding and the garbage it left
// were a third of the server's CPU. defType is the stream's type, for a
// request that names none. The result is the same message (FuzzDecode
// compares them), and the same refusals: a malformed message, or a name,
// key or value that is not UTF-8 (proto3 strings). A guarded stream's
// requests go further (decodeScanned, compare): see resumed.go.
func decodeDeltaRequest(b []byte, m *discovery.DeltaDiscoveryRequest, x *store.WireIndex, defType []byte) error {
	sc, ok := scanDelta(b)
	if !ok {
		return proto.Unmarshal(b, m) // its error
	}
	_, err := decodeScanned(b, sc, m, x, defType, false)
	return err
}

// deltaScan is what one pass over an encoded delta request finds: the
// length-delimited fields of its names and entries, the bytes of its
// other fields, and its type URL (the last one).
type deltaScan struct {
	subs, unsubs, entries, other int
	typeURL                      []byte
	valid                        bool // b was scanned, and is well formed
}

// scanDelta reads b's fields; false if b is not well formed (the decoder
// refuses it).
func scanDelta(b []byte) (deltaScan, bool) {
	var sc deltaScan
	ok := fields(b, func(num protowire.Number, v []byte, size int) {
		switch num {
		case deltaSubscribe:
			sc.subs++
		case deltaUnsubscribe:
			sc.unsubs++
		case deltaInitialVersions:
			sc.entries++
		default:
			sc.other += size
			if num == deltaTypeURL {
				sc.typeURL = v
			}
		}
	})
	sc.valid = ok
	return sc, ok
}

var (
	errNameUTF8    = errors.New("proto: resource name: string field contains invalid UTF-8")
	errEntryUTF8   = errors.New("proto: initial_resource_versions: string field contains invalid UTF-8")
	errFieldNumber = errors.New("proto: initial_resource_versions: invalid field number")
)

// decodeScanned decodes b, well formed and scanned (sc), into m. With
// compare, a resume of clusters or assignments (initial_resource_versions)
// is compared with the store as it is decoded: the entries whose version
// is the one served are returned (resumedVersions), not put in m's map,
// which holds the others only.
func decodeScanned(b []byte, sc deltaScan, m *discovery.DeltaDiscoveryRequest, x *store.WireIndex, defType []byte, compare bool) (*resumedVersions, error) {
	if sc.subs+sc.unsubs+sc.entries == 0 {
		if decodeACK(b, m) {
			return nil, nil
		}
		return nil, proto.Unmarshal(b, m)
	}
	// The other fields, as they came (a field 3, 4 or 5 that is not
	// length-delimited among them: the runtime keeps it as unknown), are
	// decoded by the runtime; the names and entries here.
	d := nameFields{rest: make([]byte, 0, sc.other)}
	if sc.subs > 0 {
		d.subs = make([]string, 0, sc.subs)
	}
	if sc.unsubs > 0 {
		d.unsubs = make([]string, 0, sc.unsubs)
	}
	typeURL := sc.typeURL
	if len(typeURL) == 0 {
		typeURL = defType
	}
	compare = compare && x != nil && sc.entries > 0 && (string(typeURL) == ClusterType || string(typeURL) == EndpointType)
	if sc.entries > 0 && !compare {
		d.versions = make(map[string]string, sc.entries)
	}
	var bad error
	x.Read(typeURL, func(t *store.WireType) {
		if compare && t != nil {
			d.r = newResumed(t, sc.entries)
		}
		d, bad = d.decode(b, t, sc.entries)
	})
	if bad != nil {
		return nil, bad // the stream ends, and gives the place back
	}
	if err := proto.Unmarshal(d.rest, m); err != nil {
		return nil, err
	}
	m.ResourceNamesSubscribe, m.ResourceNamesUnsubscribe, m.InitialResourceVersions = d.subs, d.unsubs, d.versions
	return d.r.done(), nil
}

// nameFields are what decodeScanned reads of a request: the other fields'
// bytes (rest), the names, the versions, and what was current (r).
type nameFields struct {
	rest         []byte
	subs, unsubs []string
	versions     map[string]string
	r            *resumedVersions
}

// decode reads b's fields into d (t: the index of the request's type).
// d is a copy on decode's stack, returned: its fields are stored to
// without a write barrier, which a store to a variable of
// decodeScanned's, shared with the function literal, takes while the
// collector runs. The names and the entries' keys are looked up in the
// index in batches (store.WireType.FindBatch), each then taken in the
// request's order.
func (d nameFields) decode(b []byte, t *store.WireType, entries int) (nameFields, error) {
	var p pendingNames
	var bad error
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b) // well formed: scanned
		var v []byte
		size := n
		if typ == protowire.BytesType {
			var m int
			v, m = protowire.ConsumeBytes(b[n:])
			size += m
		} else {
			size += protowire.ConsumeFieldValue(num, typ, b[n:])
		}
		isName := num == deltaSubscribe || num == deltaUnsubscribe
		switch {
		case typ != protowire.BytesType || !isName && num != deltaInitialVersions:
			d.rest = append(d.rest, b[:size]...)
		case isName:
			p.add(num, v, nil)
		default:
			var kb, vb []byte
			if kb, vb, bad = mapEntry(v); bad == nil {
				p.add(num, kb, vb)
			}
		}
		b = b[size:]
		if p.n == len(p.keys) || bad != nil || len(b) == 0 {
			var err error
			if d, err = d.take(&p, t, entries); err != nil {
				return d, err
			}
		}
		if bad != nil {
			return d, bad
		}
	}
	return d, nil
}

// pendingNames are the names and map entries read and not yet taken:
// the field of each, and its name or key (keys) and value (vals).
type pendingNames struct {
	n    int
	nums [2 * store.WireBatch]protowire.Number
	keys [2 * store.WireBatch][]byte
	vals [2 * store.WireBatch][]byte
	idx  [2 * store.WireBatch]int32
}

func (p *pendingNames) add(num protowire.Number, key, val []byte) {
	p.nums[p.n], p.keys[p.n], p.vals[p.n] = num, key, val
	p.n++
}

// take looks p's names up in t, and takes them into d in order; p is
// then empty.
func (d nameFields) take(p *pendingNames, t *store.WireType, entries int) (nameFields, error) {
	n := p.n
	p.n = 0
	t.FindBatch(p.keys[:n], p.idx[:n])
	// The entries' versions compared first, together: the served ones'
	// bytes are cache misses, whose loads then overlap.
	var same [len(p.keys)]bool
	for i := range n {
		if j := p.idx[i]; j >= 0 && p.nums[i] == deltaInitialVersions {
			same[i] = t.At(j).Version == string(p.vals[i])
		}
	}
	for i := range n {
		var w store.WireEntry
		if p.idx[i] >= 0 {
			w = t.At(p.idx[i])
		}
		v := p.keys[i]
		if p.nums[i] == deltaInitialVersions {
			var err error
			if d.r, err = versionEntry(v, p.vals[i], w, same[i], d.r, &d.versions, entries); err != nil {
				return d, err
			}
			continue
		}
		s := w.Name
		if w.Entry == nil {
			if !utf8.Valid(v) {
				return d, errNameUTF8
			}
			s = string(v)
		}
		if p.nums[i] == deltaSubscribe {
			d.subs = append(d.subs, s)
			d.r.subscribed(s, w)
		} else {
			d.unsubs = append(d.unsubs, s)
		}
	}
	return d, nil
}

// versionEntry decodes one entry of initial_resource_versions (key kb,
// value vb; w: the key's entry in the index, if found; same: vb is its
// version): a current version into r (if not nil), the others into
// versions (made at size if nil). It returns r, or nil once a key
// repeated made the map hold every entry.
func versionEntry(kb, vb []byte, w store.WireEntry, same bool, r *resumedVersions, versions *map[string]string, size int) (*resumedVersions, error) {
	found := w.Entry != nil
	if r != nil && found && same {
		// Current: the entry, read from the index only.
		if r.addCurrent(w, kb, versions) {
			return r, nil
		}
		r = nil
	}
	k, val, err := entryStrings(kb, vb, w.Entry)
	if err != nil {
		return r, err
	}
	if r != nil {
		if r.addOther(k, val, w, found, versions) {
			return r, nil
		}
		r = nil
	}
	if *versions == nil {
		*versions = make(map[string]string, size)
	}
	(*versions)[k] = val
	return r, nil
}

// mapEntry decodes one map<string, string> entry: key 1, value 2, either
// missing reads as ""; other fields are skipped.
func mapEntry(b []byte) (key, val []byte, err error) {
	// The entry as encoders write it: the key, then the value, each
	// shorter than 128 bytes (a length of one byte), and nothing else.
	if len(b) >= 4 && b[0] == 0x0a && b[1] < 0x80 {
		k := 2 + int(b[1])
		if k+2 <= len(b) && b[k] == 0x12 && b[k+1] < 0x80 && k+2+int(b[k+1]) == len(b) {
			return b[2:k], b[k+2:], nil
		}
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, nil, protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			// ConsumeTag takes field numbers up to 2³¹-1; the runtime
			// refuses those above 2²⁹-1, even in a field it skips.
			return nil, nil, errFieldNumber
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, nil, protowire.ParseError(m)
			}
			// A field repeated: the last one is the entry's, and each
			// must be UTF-8 (the runtime checks every one). (Assigned
			// here, not through a pointer to key or val: a store through
			// a pointer takes a write barrier while the collector runs.)
			prev := key
			if num == 2 {
				prev = val
			}
			if prev != nil && !utf8.Valid(prev) {
				return nil, nil, errEntryUTF8
			}
			if num == 1 {
				key = v
			} else {
				val = v
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, nil, protowire.ParseError(m)
		}
		b = b[m:]
	}
	return key, val, nil
}

// entryStrings returns a map entry's key and value (their encoded bytes)
// as strings: the store's where they are e's (the key's entry, nil if the
// store serves none), else copies, checked for UTF-8. The store's names
// and versions are valid UTF-8 (store.WireIndex.Follow): only the bytes
// that are not one of them are read again.
func entryStrings(kb, vb []byte, e *store.Entry) (key, val string, err error) {
	if e != nil {
		key = e.Name
	} else if !utf8.Valid(kb) {
		return "", "", errEntryUTF8
	}
	if e == nil {
		key = string(kb)
	}
	val, current := store.WireVersion(e, vb)
	if !current && !utf8.Valid(vb) {
		return "", "", errEntryUTF8
	}
	return key, val, nil
}
