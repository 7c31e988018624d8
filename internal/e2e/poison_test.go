package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// deepStruct nests a struct n levels deep: Envoy cannot unpack an
// assignment that carries it as metadata (protobuf's recursion limit).
func deepStruct(n int) *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{"leaf": structpb.NewBoolValue(true)}}
	for range n {
		s = &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStructValue(s)}}
	}
	return s
}

// TestPoisonResourceCostsOnlyItself serves 100 services to a real Envoy
// from the xDS cache directly (the translator would refuse the poison),
// one of whose assignments Envoy cannot unpack. Envoy rejects every
// response that carries it whole; the cache halves the rejected responses
// until the poison is alone: the other 99 assignments are applied, Envoy
// counts only the halving steps as rejected, and nothing is resent in a
// loop. A good version of the poison then goes through.
func TestPoisonResourceCostsOnlyItself(t *testing.T) {
	for _, bootstrap := range []string{"envoy-delta.yaml", "envoy-sotw.yaml"} {
		t.Run(strings.TrimSuffix(bootstrap, ".yaml"), func(t *testing.T) {
			cache, srv := xds.NewServing(xds.ServingConfig{Options: xds.Options{Logger: slog.New(slog.NewTextHandler(&testWriter{t: t}, nil))}})
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx, lis) }()
			t.Cleanup(func() { cancel(); <-done })

			const n, poison = 100, "svc042"
			service := func(i int, port uint32) translate.Resources {
				s := sources.Service{Name: fmt.Sprintf("svc%03d", i), Endpoints: []sources.Endpoint{{Address: "127.0.0.1", Port: port}}}
				res, _ := translate.Service(s)
				return res
			}
			var all []translate.Resources
			for i := range n {
				r := service(i, 20000+uint32(i))
				if r.Cluster.GetName() == poison {
					r.Load.Endpoints[0].LbEndpoints[0].Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"deep": deepStruct(48)}}
				}
				all = append(all, r)
			}
			if err := cache.PublishServices(all, nil); err != nil {
				t.Fatal(err)
			}
			cache.MarkReady()
			e := startEnvoy(t, bootstrap, lis.Addr().String())

			withHosts := func() (map[string]bool, error) {
				body, err := e.Get("/clusters")
				if err != nil {
					return nil, err
				}
				got := map[string]bool{}
				for _, line := range strings.Split(body, "\n") {
					if name, rest, ok := strings.Cut(line, "::127.0.0.1:"); ok && strings.HasSuffix(rest, "::cx_active::0") {
						got[name] = true
					}
				}
				return got, nil
			}
			waitFor(t, 30*time.Second, "99 clusters with their endpoint", func() error {
				got, err := withHosts()
				if err != nil {
					return err
				}
				if len(got) != n-1 || got[poison] {
					return fmt.Errorf("%d clusters have endpoints (poison among them: %v)", len(got), got[poison])
				}
				return nil
			})
			rejected := func() int64 {
				var sum int64
				for _, v := range e.Stats(t, "update_rejected") {
					sum += v
				}
				return sum
			}
			r1 := rejected()
			time.Sleep(2 * time.Second)
			r2 := rejected()
			t.Logf("update_rejected: %d; bridge NACKs: %d", r2, srv.NACKs())
			if r2 != r1 {
				t.Fatalf("rejections still rising (%d → %d): a resend loop", r1, r2)
			}
			// The halving steps: log2(100)+1, counted once per rejected
			// response (Envoy counts a rejected EDS response against each
			// cluster it names, so use the bridge's count).
			nacks := srv.NACKs()
			if nacks == 0 || nacks > 8 {
				t.Fatalf("%d NACKs to isolate one resource among %d", nacks, n)
			}
			if got := e.Stats(t, "cluster."+poison+".update_rejected")["cluster."+poison+".update_rejected"]; got != int64(nacks) {
				t.Fatalf("Envoy rejected %d updates of %s; the bridge saw %d NACKs", got, poison, nacks)
			}

			// A good version of the poison goes through.
			if err := cache.PublishServices([]translate.Resources{service(42, 20042)}, nil); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 20*time.Second, "all 100 clusters with their endpoint", func() error {
				got, err := withHosts()
				if err != nil {
					return err
				}
				if len(got) != n {
					return fmt.Errorf("%d clusters have endpoints", len(got))
				}
				return nil
			})
		})
	}
}
