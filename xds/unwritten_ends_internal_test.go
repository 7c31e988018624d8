package xds

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestUnwrittenBytesBackFromEveryEnd: responses larger than the unwritten
// budget, sent to grpc-go clients that read them, NACK them, end their
// stream or drop their connection while a response is written or waits
// for its turn, all give their bytes back without waiting for the
// collector or the wait to expire: the clients that read are served
// meanwhile, and so is one after them.
func TestUnwrittenBytesBackFromEveryEnd(t *testing.T) {
	const services, budget = 2000, 64 << 10
	c := clustersCache(t, services)
	s := NewServer(c, Options{Limits: Limits{MaxUnwrittenResponseBytes: budget}})
	b := s.guard.unwritten
	b.wait = time.Hour // bytes not given back would stay counted
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-done })

	// open starts a client asking for every cluster; window: its
	// flow-control windows (0: grpc-go's).
	open := func(ctx context.Context, window int32) (*grpc.ClientConn, discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient) {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20))}
		if window > 0 {
			opts = append(opts, grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window))
		}
		cc, err := grpc.NewClient(lis.Addr().String(), opts...)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
		if err == nil {
			err = st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, Node: &core.Node{Id: "n"}})
		}
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		return cc, st
	}
	// readAll reads a whole state of clusters, NACKing the first response
	// if nack (the server sends its names again).
	readAll := func(st discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, nack bool) error {
		for got := 0; got < services; {
			r, err := st.Recv()
			if err != nil {
				return err
			}
			if nack {
				nack = false
				if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: r.GetNonce(),
					ErrorDetail: &rpcstatus.Status{Code: 3, Message: "rejected"}}); err != nil {
					return err
				}
				continue
			}
			got += len(r.Resources)
			if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: r.GetNonce()}); err != nil {
				return err
			}
		}
		return nil
	}
	// reads is a client that reads its state, NACKing the first
	// response if nack.
	reads := func(nack bool) func() {
		return func() {
			cctx, stop := context.WithCancel(ctx)
			defer stop()
			cc, st := open(cctx, 0)
			if cc == nil {
				return
			}
			defer cc.Close()
			if err := readAll(st, nack); err != nil {
				t.Errorf("a client that reads (NACKing: %v): %v", nack, err)
			}
		}
	}
	ends := map[string]func(){
		"reads": reads(false),
		"nacks": reads(true),
		"ends its stream": func() {
			cctx, stop := context.WithCancel(ctx)
			cc, _ := open(cctx, 64<<10)
			time.Sleep(20 * time.Millisecond)
			stop()
			if cc != nil {
				time.Sleep(20 * time.Millisecond)
				cc.Close()
			}
		},
		"drops its connection": func() {
			cc, _ := open(ctx, 64<<10)
			time.Sleep(20 * time.Millisecond)
			if cc != nil {
				cc.Close()
			}
		},
	}
	var wg sync.WaitGroup
	for range 3 {
		for _, end := range ends {
			wg.Go(end)
		}
	}
	wg.Wait()
	inUse := func() int64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.used
	}
	// Without a collection: a buffer gRPC dropped with its connection
	// is freed only by one.
	for deadline := time.Now().Add(5 * time.Second); inUse() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still counted after every client went", inUse())
		}
	}
	cctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	cc, st := open(cctx, 0)
	if cc == nil || t.Failed() {
		t.FailNow()
	}
	defer cc.Close()
	if err := readAll(st, false); err != nil {
		t.Fatalf("a client after them: %v", err)
	}
	if got := testutil.ToFloat64(s.m.guard.responsesWaited.WithLabelValues("expired")); got != 0 {
		t.Errorf("%v responses went only once bytes expired", got)
	}
}
