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
// key or value that is not UTF-8 (proto3 strings).
func decodeDeltaRequest(b []byte, m *discovery.DeltaDiscoveryRequest, x *store.WireIndex, defType []byte) error {
	sc, ok := scanDelta(b)
	if !ok {
		return proto.Unmarshal(b, m) // its error
	}
	return decodeScanned(b, sc, m, x, defType)
}

// deltaScan is what one pass over an encoded delta request finds: the
// length-delimited fields of its names and entries, the bytes of its
// other fields, and its type URL (the last one).
type deltaScan struct {
	subs, unsubs, entries, other int
	typeURL                      []byte
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
	return sc, ok
}

var (
	errNameUTF8    = errors.New("proto: resource name: string field contains invalid UTF-8")
	errEntryUTF8   = errors.New("proto: initial_resource_versions: string field contains invalid UTF-8")
	errFieldNumber = errors.New("proto: initial_resource_versions: invalid field number")
)

// decodeScanned decodes b, well formed and scanned (sc), into m.
func decodeScanned(b []byte, sc deltaScan, m *discovery.DeltaDiscoveryRequest, x *store.WireIndex, defType []byte) error {
	if sc.subs+sc.unsubs+sc.entries == 0 {
		return proto.Unmarshal(b, m)
	}
	// The other fields, as they came (a field 3, 4 or 5 that is not
	// length-delimited among them: the runtime keeps it as unknown), are
	// decoded by the runtime; the names and entries here.
	rest := make([]byte, 0, sc.other)
	var subs, unsubs []string
	if sc.subs > 0 {
		subs = make([]string, 0, sc.subs)
	}
	if sc.unsubs > 0 {
		unsubs = make([]string, 0, sc.unsubs)
	}
	var versions map[string]string
	if sc.entries > 0 {
		versions = make(map[string]string, sc.entries)
	}
	typeURL := sc.typeURL
	if len(typeURL) == 0 {
		typeURL = defType
	}
	var bad error
	x.Read(typeURL, func(entries map[string]*store.Entry) {
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b) // well formed: scanned
			size := n + protowire.ConsumeFieldValue(num, typ, b[n:])
			isName := num == deltaSubscribe || num == deltaUnsubscribe
			switch {
			case typ != protowire.BytesType || !isName && num != deltaInitialVersions:
				rest = append(rest, b[:size]...)
			case bad != nil:
			case isName:
				v, _ := protowire.ConsumeBytes(b[n:])
				s, e := store.WireName(entries, v)
				if e == nil && !utf8.Valid(v) {
					bad = errNameUTF8
					break
				}
				if num == deltaSubscribe {
					subs = append(subs, s)
				} else {
					unsubs = append(unsubs, s)
				}
			default:
				v, _ := protowire.ConsumeBytes(b[n:])
				bad = mapEntry(v, entries, versions)
			}
			b = b[size:]
		}
	})
	if bad != nil {
		return bad // the stream ends, and gives the place back
	}
	if err := proto.Unmarshal(rest, m); err != nil {
		return err
	}
	m.ResourceNamesSubscribe, m.ResourceNamesUnsubscribe, m.InitialResourceVersions = subs, unsubs, versions
	return nil
}

// mapEntry decodes one map<string, string> entry into versions: key 1,
// value 2, either missing reads as ""; other fields are skipped. The key
// and value are the store's strings where it serves them (entries).
func mapEntry(b []byte, entries map[string]*store.Entry, versions map[string]string) error {
	var key, val []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			// ConsumeTag takes field numbers up to 2³¹-1; the runtime
			// refuses those above 2²⁹-1, even in a field it skips.
			return errFieldNumber
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
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
			return protowire.ParseError(m)
		}
		b = b[m:]
	}
	// The store's names and versions are valid UTF-8 (store.WireIndex.Follow):
	// only the bytes that are not one of them are read again.
	k, e := store.WireName(entries, key)
	if e == nil && !utf8.Valid(key) {
		return errEntryUTF8
	}
	v, stores := store.WireVersion(e, val)
	if !stores && !utf8.Valid(val) {
		return errEntryUTF8
	}
	versions[k] = v
	return nil
}
