package xds_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// keepingCodec is a client codec that keeps the bytes of each message it
// decodes, by the message decoded into.
type keepingCodec struct{ raw sync.Map } // proto.Message → []byte

func (*keepingCodec) Name() string { return "proto" }

func (*keepingCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (c *keepingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b := data.Materialize()
	c.raw.Store(v, b)
	return proto.Unmarshal(b, v.(proto.Message))
}

// TestDeltaServedBytesMatchStore: over random histories of services
// (endpoints changed, clusters changed so that their assignments are
// re-versioned with the same content, services removed and published
// again) and of a grpc-go delta client's EDS subscriptions, each response
// the served stack writes is the canonical encoding of the response the
// client decodes (proto.Marshal's bytes), and once the client has acked,
// what it holds (names, versions, contents) is what the store serves: a
// resource's encoding sent stale would leave the client on a version the
// server believes it replaced.
func TestDeltaServedBytesMatchStore(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { deltaBytesHistory(t, seed) })
	}
}

func deltaBytesHistory(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 13))
	c := xds.NewCache()
	c.MarkReady()
	addr := runServer(t, xds.NewServer(c, xds.Options{}))
	rc := &keepingCodec{}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rc)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resps := make(chan *discovery.DeltaDiscoveryResponse, 16)
	go func() {
		defer close(resps)
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			resps <- r
		}
	}()

	const nsvc = 8
	svcName := func(i int) string { return fmt.Sprintf("s%d", i) }
	publish := func() {
		var changed []translate.Resources
		var removed []string
		for i := range nsvc {
			switch rng.IntN(4) {
			case 0: // unchanged
			case 1:
				removed = append(removed, svcName(i))
			default:
				r := svc(svcName(i), 1000+uint32(rng.IntN(3)), 2000+uint32(rng.IntN(2)))
				// The cluster's change alone re-versions its assignment.
				r.Cluster.ConnectTimeout.Seconds = int64(1 + rng.IntN(3))
				changed = append(changed, r)
			}
		}
		if err := c.PublishServices(changed, removed); err != nil {
			t.Fatal(err)
		}
	}
	send := func(r *discovery.DeltaDiscoveryRequest) {
		t.Helper()
		r.Node = &core.Node{Id: "bytes"}
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	holds := map[string]map[string]clientHeld{xds.ClusterType: {}, xds.EndpointType: {}}
	subscribed := map[string]bool{}
	// settle acks every response until the client holds what the store
	// serves it.
	settle := func(step int) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			diff := heldDiff(c, holds, subscribed)
			if diff == "" {
				return
			}
			select {
			case r, ok := <-resps:
				if !ok {
					t.Fatalf("step %d: stream ended", step)
				}
				raw, _ := rc.raw.LoadAndDelete(r)
				want, err := proto.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				if b, _ := raw.([]byte); !slices.Equal(b, want) {
					t.Fatalf("step %d: response %s: served %x, proto.Marshal of what the client decoded %x", step, r.Nonce, b, want)
				}
				h := holds[r.TypeUrl]
				for _, res := range r.Resources {
					if r.TypeUrl == xds.EndpointType && !subscribed[res.Name] {
						continue // sent before the unsubscription was read
					}
					h[res.Name] = clientHeld{res.Version, res.GetResource().GetValue()}
				}
				for _, n := range r.RemovedResources {
					delete(h, n)
				}
				send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
			case <-deadline:
				t.Fatalf("step %d: the client holds, -store +client:\n%s", step, diff)
			}
		}
	}
	for i := range nsvc {
		if rng.IntN(2) == 0 {
			subscribed[svcName(i)] = true
		}
	}
	publish()
	send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.ClusterType})
	send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNamesSubscribe: setNames(subscribed)})
	settle(0)
	for step := 1; step <= 30; step++ {
		if rng.IntN(3) == 0 {
			n := svcName(rng.IntN(nsvc))
			if subscribed[n] {
				// A client forgets what it unsubscribes from.
				delete(subscribed, n)
				delete(holds[xds.EndpointType], n)
				send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNamesUnsubscribe: []string{n}})
			} else {
				subscribed[n] = true
				send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNamesSubscribe: []string{n}})
			}
		} else {
			publish()
		}
		settle(step)
	}
}

func setNames(m map[string]bool) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// clientHeld is a resource as a client holds it.
type clientHeld struct {
	version string
	value   []byte
}

// heldDiff compares what the client holds with what the store serves it
// (every cluster; the subscribed assignments), versions and contents; ""
// when equal.
func heldDiff(c *xds.Cache, holds map[string]map[string]clientHeld, subscribed map[string]bool) string {
	var diff []string
	for typ, h := range holds {
		want := map[string]bool{}
		for _, r := range c.List(typ) {
			if typ == xds.EndpointType && !subscribed[r.Name] {
				continue
			}
			want[r.Name] = true
			got, ok := h[r.Name]
			if !ok {
				diff = append(diff, fmt.Sprintf("-%s %s@%s", typ, r.Name, r.Version))
				continue
			}
			m := r.Msg.ProtoReflect().New().Interface()
			if got.version != r.Version || proto.Unmarshal(got.value, m) != nil || !proto.Equal(m, r.Msg) {
				diff = append(diff, fmt.Sprintf("-%s %s@%s +%s (same content: %v)", typ, r.Name, r.Version, got.version, proto.Equal(m, r.Msg)))
			}
		}
		for n, got := range h {
			if !want[n] {
				diff = append(diff, fmt.Sprintf("+%s %s@%s", typ, n, got.version))
			}
		}
	}
	slices.Sort(diff)
	return strings.Join(diff, "\n")
}
