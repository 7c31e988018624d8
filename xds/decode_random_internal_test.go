package xds

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/protobuf/encoding/protowire"
)

// TestDecodeRandomRequestsAsUnmarshal: random delta requests of up to
// several batches of names and initial_resource_versions entries, of the
// index's names and others (long, empty, repeated), the entries in every
// form (the common one, lengths of two bytes, value first, a key or
// value repeated or missing, unknown fields, a tag not minimal, a key of
// the wrong wire type), and now and then a name or entry not UTF-8 or
// malformed after the others, decode to what proto.Unmarshal decodes, or
// are refused where it refuses them.
func TestDecodeRandomRequestsAsUnmarshal(t *testing.T) {
	x := store.NewWireIndex()
	var served []*store.Entry
	for i := range 40 {
		served = append(served, &store.Entry{Name: fmt.Sprintf("n%02d", i), Version: "1"})
	}
	long := strings.Repeat("l", 130)
	served = append(served, &store.Entry{Name: long, Version: strings.Repeat("1", 130)}, &store.Entry{Name: "", Version: "1"})
	indexEntries(x, EndpointType, served...)
	indexEntries(x, ClusterType, served[:20]...)
	// Lengths of one byte and of two, at the bound.
	names := []string{"n00", "n07", "n19", "n20", "n39", "m01", "", long, long + "x", "n0", strings.Repeat("m", 127), strings.Repeat("m", 128)}
	versions := []string{"1", "2", "", strings.Repeat("1", 130), strings.Repeat("2", 127), strings.Repeat("2", 128)}
	g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
	r := rand.New(rand.NewPCG(7, 8))
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	bad := func() bool { return r.IntN(150) == 0 }
	refused := 0
	for range 1500 {
		var b []byte
		for range r.IntN(110) {
			switch k := r.IntN(20); {
			case k < 6:
				n := pick(names)
				if bad() {
					n += "\xff"
				}
				b = str([]protowire.Number{deltaSubscribe, deltaUnsubscribe}[k%2], n)(b)
			case k < 17:
				b = append(b, randomEntry(r, pick(names), pick(versions), bad)...)
			case k < 18:
				b = str(deltaTypeURL, pick([]string{EndpointType, ClusterType, "type.example/other"}))(b)
			case k < 19:
				b = str(deltaNonce, "3")(b)
			default:
				b = protowire.AppendVarint(protowire.AppendTag(b, deltaInitialVersions, protowire.VarintType), 1)
			}
		}
		if _, ok := scanDelta(b); !ok {
			t.Fatalf("made a malformed request %x", b)
		}
		if decodeDeltaRequest(b, &discovery.DeltaDiscoveryRequest{}, x, nil) != nil {
			refused++
		}
		decodesAsUnmarshal(t, b, x, g)
	}
	if refused < 100 || refused > 1000 {
		t.Fatalf("%d of 1500 requests refused: the case is not made", refused)
	}
}

// randomEntry is an initial_resource_versions entry of key k and value
// v, in a random one of the forms an encoder may write; if bad(), with
// a key or value not UTF-8 or bytes malformed.
func randomEntry(r *rand.Rand, k, v string, bad func() bool) []byte {
	if bad() {
		if r.IntN(2) == 0 {
			k += "\xc3"
		} else {
			v += "\xff"
		}
	}
	var parts []func([]byte) []byte
	switch r.IntN(10) {
	case 0:
		parts = append(parts, str(2, v), str(1, k)) // value first
	case 1:
		parts = append(parts, str(1, k)) // no value
	case 2:
		parts = append(parts, str(2, v)) // no key
	case 3:
		parts = append(parts, str(1, "other"), str(1, k), str(2, "0"), str(2, v)) // repeated
	case 4:
		parts = append(parts, str(1, k), str(2, v), str(3, "unknown"))
	case 5:
		parts = append(parts, str(1, k), func(b []byte) []byte {
			return protowire.AppendVarint(protowire.AppendTag(b, 9, protowire.VarintType), 4)
		}, str(2, v))
	case 6:
		// A key tag of two bytes (not minimal).
		parts = append(parts, func(b []byte) []byte {
			return protowire.AppendString(append(b, 0x8a, 0x00), k)
		}, str(2, v))
	case 7:
		// A key of the wrong wire type, then the key.
		parts = append(parts, func(b []byte) []byte {
			return protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), 1)
		}, str(1, k), str(2, v))
	default:
		parts = append(parts, str(1, k), str(2, v))
	}
	if bad() {
		// Cut short inside: a length past the entry's end.
		parts = append(parts, func(b []byte) []byte { return append(b, 0x12, 0x05, 'x') })
	}
	return entryBytes(parts...)
}
