package xds

import (
	"fmt"
	"google.golang.org/protobuf/encoding/protowire"
	"slices"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// newTestStreamAcct is a stream's accounting under the default limits,
// on a connection of its own.
func newTestStreamAcct(g *guard) *streamAcct {
	return &streamAcct{g: g, conn: &connAcct{}}
}

// A delta request that only subscribes counts each name once, however
// often it repeats it: as many names and bytes as the same request
// without the repeats, on a fresh stream and on one already subscribed to
// some of them.
func TestGuardSubscribeRepeatedNames(t *testing.T) {
	names := make([]string, 50)
	for i := range names {
		names[i] = fmt.Sprintf("cluster-%03d", i)
	}
	repeated := append(append([]string{}, names...), names[7], names[49], names[7])
	wire := func(subs []string) []byte {
		b, err := proto.Marshal(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: subs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
	for _, before := range [][]string{nil, names[:10], names[40:]} {
		plain, rep := newTestStreamAcct(g), newTestStreamAcct(g)
		for _, a := range []*streamAcct{plain, rep} {
			if len(before) > 0 {
				if err := a.checkWire(&discovery.DeltaDiscoveryRequest{}, wire(before)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := plain.checkWire(&discovery.DeltaDiscoveryRequest{}, wire(names)); err != nil {
			t.Fatal(err)
		}
		if err := rep.checkWire(&discovery.DeltaDiscoveryRequest{}, wire(repeated)); err != nil {
			t.Fatal(err)
		}
		if n := plain.types.at(EndpointType).set.len(); n != len(names) {
			t.Fatalf("subscribed to %d names after %d: a set of %d", len(names), len(before), n)
		}
		if rep.names.Load() != plain.names.Load() || rep.types.at(EndpointType).bytes != plain.types.at(EndpointType).bytes {
			t.Fatalf("after %d names, with repeats: %d names of %d bytes; without: %d of %d", len(before),
				rep.names.Load(), rep.types.at(EndpointType).bytes, plain.names.Load(), plain.types.at(EndpointType).bytes)
		}
		if rep.types.at(EndpointType).set != plain.types.at(EndpointType).set {
			t.Fatalf("after %d names: the sets with and without repeats differ", len(before))
		}
	}
}

// The server holds a type's last request until its next, so the bytes of
// the names in it that change no subscription (a name repeated, one
// subscribed already, an unsubscription of a name not subscribed) count
// as the request's held bytes: a request of many bytes of such names is
// refused at max_name_bytes_per_stream as one of as many bytes of new
// names is.
func TestGuardRepeatedNamesBytesHeld(t *testing.T) {
	lim := Limits{MaxNameBytesPerStream: 64 << 10}.WithDefaults()
	g := newGuard(lim, newGuardMetrics())
	many := func(name string) []string {
		out := make([]string, 40000) // ~ 10 bytes each on the wire: 400 kB
		for i := range out {
			out[i] = name
		}
		return out
	}
	for what, req := range map[string]proto.Message{
		"delta subscribe":   &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: many("cluster-a")},
		"delta unsubscribe": &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesUnsubscribe: many("cluster-a")},
		"sotw":              &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: many("cluster-a")},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		a := newTestStreamAcct(g)
		err = a.checkWire(req, b)
		if err == nil {
			t.Errorf("%s: a request of %d bytes of one name repeated: accepted, %d bytes counted", what, len(b), a.bytes.Load())
		}
		a.release()
	}
}

// A sotw request naming one of the stream's two names twice subscribes to
// that one name: it is not taken for the set it matches in size.
func TestGuardSotwRepeatIsNotTheSameSet(t *testing.T) {
	g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
	a := newTestStreamAcct(g)
	defer a.release()
	for _, names := range [][]string{{"cluster-a", "cluster-b"}, {"cluster-a", "cluster-a"}} {
		req := &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: names}
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.checkWire(req, b); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.types.at(EndpointType).set.len(); n != 1 || a.names.Load() != 2 { // the type counts as one name too
		t.Errorf("after [a b] then [a a]: a set of %d, %d names counted; want 1 and 2", n, a.names.Load())
	}
}

// A delta request's names subscribed already, or unsubscribed without
// being subscribed, count as its held bytes as encoded (tag and length
// included), the new names by their length, with the type URL before
// or after the names, in a request that only subscribes and in one that
// unsubscribes too.
func TestGuardSubscribedAgainHeldAsEncoded(t *testing.T) {
	field := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	old := []string{"cluster-a", "cluster-b", strings.Repeat("c", 200)}
	added := []string{"cluster-d", strings.Repeat("e", 300)}
	g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
	for _, typeLast := range []bool{false, true} {
		for _, unsub := range []bool{false, true} {
			a := newTestStreamAcct(g)
			var first []byte
			for _, n := range old {
				first = field(first, deltaSubscribe, n)
			}
			first = field(first, deltaTypeURL, EndpointType)
			if err := a.checkWire(&discovery.DeltaDiscoveryRequest{}, first); err != nil {
				t.Fatal(err)
			}
			var b []byte
			if !typeLast {
				b = field(b, deltaTypeURL, EndpointType)
			}
			for _, n := range append(slices.Clone(old), added...) {
				b = field(b, deltaSubscribe, n)
			}
			if unsub {
				b = field(b, deltaUnsubscribe, "cluster-z")
			}
			if typeLast {
				b = field(b, deltaTypeURL, EndpointType)
			}
			if err := a.checkWire(&discovery.DeltaDiscoveryRequest{}, b); err != nil {
				t.Fatal(err)
			}
			// Held: the type and every name subscribed, and the request's bytes but
			// its new names' fields.
			want := len(b)
			for _, n := range old {
				want += len(n)
			}
			for _, n := range added {
				want -= len(field(nil, deltaSubscribe, n)) - len(n)
			}
			if got := a.bytes.Load(); got != int64(want) || a.names.Load() != int64(1+len(old)+len(added)) {
				t.Fatalf("type URL last %v, unsubscribing %v: %d names of %d bytes held; want %d of %d",
					typeLast, unsub, a.names.Load(), got, 1+len(old)+len(added), want)
			}
			a.release()
		}
	}
}
