package xds

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// acctModel is a delta stream's accounting as a plain model: each type's
// names subscribed (strings), the bytes of its last request that are not
// names that changed a subscription, and its initial versions' bytes.
type acctModel struct {
	defType string
	types   map[string]*acctModelType
}

type acctModelType struct {
	set             map[string]bool
	other           int
	ivFirst, ivLast int
	requests        int
}

// apply applies an encoded delta request, as the delta handler applies
// its names: the subscriptions, then the unsubscriptions.
func (m *acctModel) apply(b []byte) {
	type field struct {
		num  protowire.Number
		v    []byte
		size int
	}
	var fs []field
	typeURL := ""
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return
		}
		k := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if k < 0 {
			return
		}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(rest[n:])
			fs = append(fs, field{num, v, n + k})
			if num == deltaTypeURL {
				typeURL = string(v)
			}
		}
		rest = rest[n+k:]
	}
	if typeURL == "" {
		typeURL = m.defType
	}
	tn := m.types[typeURL]
	if tn == nil {
		tn = &acctModelType{set: map[string]bool{}}
		m.types[typeURL] = tn
	}
	tn.requests++
	names, iv, extra := 0, 0, 0
	added, removed := map[string]bool{}, map[string]bool{}
	for _, f := range fs {
		switch f.num {
		case deltaSubscribe:
			names += f.size
			if tn.set[string(f.v)] || added[string(f.v)] {
				extra += f.size
				continue
			}
			added[string(f.v)] = true
		case deltaInitialVersions:
			iv += f.size
		}
	}
	for _, f := range fs {
		if f.num != deltaUnsubscribe {
			continue
		}
		names += f.size
		if removed[string(f.v)] || !tn.set[string(f.v)] && !added[string(f.v)] {
			extra += f.size
			continue
		}
		removed[string(f.v)] = true
	}
	for n := range added {
		tn.set[n] = true
	}
	for n := range removed {
		delete(tn.set, n)
	}
	if servedType(typeURL) == "other" {
		iv = 0
	}
	if tn.requests == 1 {
		tn.ivFirst = iv
	} else {
		tn.ivLast = iv
	}
	tn.other = len(b) - names - iv + extra
}

// held is the model's names, bytes and initial versions' bytes.
func (m *acctModel) held() (names, bytes, iv int64) {
	for _, tn := range m.types {
		names += int64(1 + len(tn.set))
		bytes += int64(tn.other)
		for n := range tn.set {
			bytes += int64(len(n))
		}
		iv += int64(tn.ivFirst + tn.ivLast)
	}
	return names, bytes, iv
}

// randomDeltaRequest is a delta request of random fields: a type URL
// (served, other, none, or twice), names subscribed and unsubscribed
// from a small pool (repeated, subscribed already, not subscribed),
// initial versions, a node, a nonce, a field 3 that is a varint; and
// sometimes cut short (malformed).
func randomDeltaRequest(r *rand.Rand) []byte {
	pool := []string{"", "a", "b", "cluster-c", "d\xff", "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"}
	types := []string{EndpointType, ClusterType, "type.example/other", ""}
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	var b []byte
	for range r.IntN(40) {
		switch k := r.IntN(20); {
		case k < 7:
			b = str(b, deltaSubscribe, pool[r.IntN(len(pool))])
		case k < 11:
			b = str(b, deltaUnsubscribe, pool[r.IntN(len(pool))])
		case k < 14:
			e := str(str(nil, 1, pool[r.IntN(len(pool))]), 2, "v1")
			b = protowire.AppendBytes(protowire.AppendTag(b, deltaInitialVersions, protowire.BytesType), e)
		case k < 16:
			b = str(b, deltaTypeURL, types[r.IntN(len(types))])
		case k < 17:
			b = str(b, deltaNode, "node")
		case k < 18:
			b = str(b, deltaNonce, "7")
		default:
			b = protowire.AppendVarint(protowire.AppendTag(b, deltaSubscribe, protowire.VarintType), 9)
		}
	}
	if len(b) > 0 && r.IntN(15) == 0 {
		b = b[:r.IntN(len(b))]
	}
	return b
}

// TestGuardDeltaAccountingMatchesModel: over random histories of delta
// requests, on streams of one type and ADS streams, two at a time on one
// guard, each stream's names, held bytes and initial versions' bytes are
// the model's after every request, and the guard's total is the sum of
// the streams' once they are done; with the subscriptions hashed in the
// first pass, and with most requests having more subscriptions than
// that pass keeps.
func TestGuardDeltaAccountingMatchesModel(t *testing.T) {
	for _, hashed := range []int{Limits{}.WithDefaults().MaxNamesPerStream + 1, 3} {
		t.Run(fmt.Sprint("hashed=", hashed), func(t *testing.T) {
			g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
			g.subsHashed = hashed
			accountingMatchesModel(t, g)
		})
	}
}

// TestGuardSubscriptionListBounded: a delta request of many more
// subscriptions than max_names_per_stream (names repeated) leaves the
// accounting's list of them no longer than the limit, and is accounted
// as the model accounts it.
func TestGuardSubscriptionListBounded(t *testing.T) {
	g := newGuard(Limits{MaxNamesPerStream: 100}.WithDefaults(), newGuardMetrics())
	var b []byte
	for i := range 5000 {
		b = protowire.AppendString(protowire.AppendTag(b, deltaSubscribe, protowire.BytesType), fmt.Sprint("name-", i%7))
	}
	a := newTestStreamAcct(g)
	sp := new([]subName)
	if err := a.applyRequest(true, b, nil, sp); err != nil {
		t.Fatal(err)
	}
	if len(*sp) > 101 || cap(*sp) > 2*101 {
		t.Errorf("a list of %d subscriptions (capacity %d) kept for a request of 5,000, max_names_per_stream 100", len(*sp), cap(*sp))
	}
	m := &acctModel{types: map[string]*acctModelType{}}
	m.apply(b)
	if names, bytes, _ := m.held(); a.names.Load() != names || a.bytes.Load() != bytes {
		t.Errorf("held %d names, %d bytes; the model %d, %d", a.names.Load(), a.bytes.Load(), names, bytes)
	}
}

func accountingMatchesModel(t *testing.T, g *guard) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	for w := range 2 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 5))
			for h := range 150 {
				a := newTestStreamAcct(g)
				m := &acctModel{types: map[string]*acctModelType{}}
				if h%2 == 0 {
					a.defType, m.defType = []byte(EndpointType), EndpointType
				}
				for step := range 1 + r.IntN(20) {
					b := randomDeltaRequest(r)
					if err := a.checkWire(&discovery.DeltaDiscoveryRequest{}, b); err != nil {
						t.Errorf("history %d.%d step %d: %v", w, h, step, err)
						return
					}
					m.apply(b)
					names, bytes, iv := m.held()
					if a.names.Load() != names || a.bytes.Load() != bytes || a.ivBytes.Load() != iv {
						t.Errorf("history %d.%d step %d, request %x: held %d names, %d bytes, %d of initial versions; the model %d, %d, %d",
							w, h, step, b, a.names.Load(), a.bytes.Load(), a.ivBytes.Load(), names, bytes, iv)
						return
					}
				}
				if h%3 == 0 {
					a.release()
					continue
				}
				mu.Lock()
				total += a.bytes.Load() + a.ivBytes.Load()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got := g.bytes.Load(); got != total {
		t.Errorf("the guard holds %d bytes; its streams %d", got, total)
	}
}
