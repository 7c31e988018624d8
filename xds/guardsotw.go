package xds

import (
	"hash/maphash"
	"slices"
	"unicode/utf8"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A sotw client lists its names again in every request, its ACKs
// included (grpc-go, Envoy): a client of 1,000 clusters sends 1,000 names
// with each ACK. The stream's accounting keeps, per type, the names of the
// last request as decoded (typeNames.list). A request that lists the same
// names in the same order is compared with them byte for byte, nothing
// hashed (sotwNames), and decoded with that list as its names, nothing
// allocated per name (decodeSotwRepeat). Any other request is hashed and
// decoded by the protobuf runtime, and its names are kept for the next.
//
// The list is shared by the requests decoded with it and the accounting:
// nothing writes a request's ResourceNames (sotwSub.set copies them).

// Field numbers of DiscoveryRequest read here besides sotwResourceNames
// and sotwTypeURL.
const sotwVersionInfo, sotwResponseNonce protowire.Number = 1, 5

// sotwNames replaces the type's set with a sotw request's list;
// unchanged (the common ACK), nothing is rebuilt. It returns the change in
// names and bytes, and the bytes (as encoded) of the names repeated. A
// list the same as the last request's, in order, is noted for the decoder
// (a.repeat).
func (a *streamAcct) sotwNames(tn *typeNames, b []byte) (dn, db, extra int) {
	if tn.list != nil && sameNames(b, tn.list) {
		a.repeat = tn.list
		return 0, 0, tn.extra
	}
	tn.list = nil // the decoder keeps the request's
	n, same := 0, true
	var sum uint64
	fields(b, func(num protowire.Number, v []byte, _ int) {
		if num == sotwResourceNames {
			n++
			if same {
				h := maphash.Bytes(a.g.seed, v)
				same = tn.set.has(h)
				sum += h
			}
		}
	})
	// As many names as the set, each in it, and the same sum of hashes:
	// the set's names, none repeated (a repeat would leave one of the
	// set's out, and the sums differ).
	if same && n == tn.set.len() && sum == tn.set.h {
		tn.extra = 0
		return 0, 0, 0
	}
	dn -= tn.set.len()
	db -= tn.bytes
	tn.bytes = 0
	var hs []uint64
	seen := make(map[uint64]struct{}, min(n, a.g.lim.MaxNamesPerStream+1))
	fields(b, func(num protowire.Number, v []byte, size int) {
		if num != sotwResourceNames {
			return
		}
		h := maphash.Bytes(a.g.seed, v)
		if _, ok := seen[h]; ok {
			extra += size
			return
		}
		seen[h] = struct{}{}
		hs = append(hs, h)
		tn.bytes += len(v)
		dn++
		db += len(v)
	})
	tn.set = hashSets.empty.derive(hs, nil)
	tn.extra = extra
	return dn, db, extra
}

// sameNames reports whether the resource names of request b are list, in
// order.
func sameNames(b []byte, list []string) bool {
	i, same := 0, true
	ok := fields(b, func(num protowire.Number, v []byte, _ int) {
		if num != sotwResourceNames || !same {
			return
		}
		same = i < len(list) && string(v) == list[i]
		i++
	})
	return ok && same && i == len(list)
}

// decodeSotw decodes a sotw request of a guarded stream, after its
// accounting: with the type's last names if the accounting found them
// repeated, else by the protobuf runtime, keeping its names for the next.
func (a *streamAcct) decodeSotw(b []byte, m *discovery.DiscoveryRequest) error {
	a.mu.Lock()
	list := a.repeat
	a.repeat = nil
	a.mu.Unlock()
	if list != nil && decodeSotwRepeat(b, m, list) {
		return nil
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	typeURL := m.GetTypeUrl()
	if typeURL == "" {
		typeURL = string(a.defType)
	}
	if tn := a.types.at(typeURL); tn != nil && tn.extra == 0 {
		// A list of repeated names is not kept: what is kept is at most
		// max_names_per_stream names.
		tn.list = keptList(m.GetResourceNames())
	}
	return nil
}

// keptList is the copy of a sotw request's names the accounting keeps:
// the copy the streams that listed the same names share (sotwSub.listed),
// if one is alive, else its own. A fleet of clients listing 5,000 names
// then holds one list, and the names' strings of one request.
func keptList(names []string) []string {
	if _, shared := sotwNames.listed(names); shared != nil {
		return shared
	}
	return slices.Clone(names)
}

// decodeSotwRepeat decodes b into m, with list as its names, if b holds
// a version, names (list, as sameNames found), a type URL and a nonce
// only, each occurrence valid UTF-8. It reports false, and leaves m as
// it was, for any other field (a node, an error: the runtime decodes
// those).
func decodeSotwRepeat(b []byte, m *discovery.DiscoveryRequest, list []string) bool {
	var version, typeURL, nonce []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		v, k := protowire.ConsumeBytes(b[n:])
		if k < 0 {
			return false
		}
		// A field repeated: the last one is the message's, but the
		// runtime refuses any occurrence that is not UTF-8 (a name is
		// one of list's, decoded by the runtime).
		if num != sotwResourceNames && !utf8.Valid(v) {
			return false
		}
		switch num {
		case sotwVersionInfo:
			version = v
		case sotwResourceNames:
		case sotwTypeURL:
			typeURL = v
		case sotwResponseNonce:
			nonce = v
		default:
			return false
		}
		b = b[n+k:]
	}
	m.Reset()
	m.VersionInfo, m.ResourceNames, m.TypeUrl, m.ResponseNonce = string(version), list, servedTypeURL(typeURL), string(nonce)
	return true
}
