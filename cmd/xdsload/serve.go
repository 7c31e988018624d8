package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // XDSLOAD_PPROF: profiles of the serving process while it runs
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// Targets.
const (
	targetBridge   = "bridge"
	targetBaseline = "baseline"
)

// serverStats are the serving side's counters. CPU and RSS come from
// getrusage(RUSAGE_SELF) of the process the server runs in: the child
// process ("xdsload serve"), or the whole harness with -inprocess.
type serverStats struct {
	Target      string  `json:"target"`
	InProcess   bool    `json:"in_process"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	MaxRSSBytes int64   `json:"max_rss_bytes"`
	RSSBytes    int64   `json:"rss_bytes"`
	HeapBytes   uint64  `json:"heap_bytes"`
	Goroutines  int     `json:"goroutines"`
	Changes     int64   `json:"changes"`  // changes applied
	Batches     int64   `json:"batches"`  // publishes (bridge) or snapshots (baseline)
	Versions    uint64  `json:"versions"` // resource versions created by the changes
	// Encodings: the bridge cache's count of resource encodings; for the
	// baseline, the resources in responses sent (go-control-plane encodes
	// each resource of each response) plus the resources hashed for delta
	// version maps (one encoding each, per snapshot).
	Encodings uint64 `json:"encodings"`
}

// server is the serving side: the bridge's cache and xDS server, or the
// baseline (go-control-plane SnapshotCache, one snapshot rebuilt and set
// for every node on each change). Changes are queued and applied by one
// goroutine; whatever queued while it was busy is applied as one batch.
type server struct {
	target              string
	services, endpoints int
	nodes               []string

	lis    net.Listener
	cancel context.CancelFunc
	done   chan error
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending []change
	wake    chan struct{}

	markers []int // owned by the applier

	changes, batches atomic.Int64
	versions         atomic.Uint64
	sent             atomic.Uint64 // baseline: resources in responses
	hashed           atomic.Uint64 // baseline: resources hashed for delta

	bc *xds.Cache
	sc cache.SnapshotCache
}

type change struct{ seq, svc int }

func startServer(target string, services, endpoints, clients int) (*server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{
		target: target, services: services, endpoints: endpoints,
		lis: lis, cancel: cancel, done: make(chan error, 1),
		wake: make(chan struct{}, 1), markers: make([]int, services),
	}
	for i := range clients {
		s.nodes = append(s.nodes, nodeID(i))
	}
	switch target {
	case targetBridge:
		s.bc = xds.NewCache()
		all := make([]translate.Resources, services)
		for i := range services {
			all[i], _ = translate.Service(service(i, endpoints, 0))
		}
		if err := s.bc.PublishServices(all, nil); err != nil {
			cancel()
			return nil, err
		}
		s.bc.MarkReady()
		srv := xds.NewServer(s.bc, xds.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		go func() { s.done <- srv.Run(ctx, lis) }()
	case targetBaseline:
		// ads=false: in ADS mode the snapshot cache answers a sotw request
		// only if it names every resource of the type in the snapshot, which
		// grpc-go-like clients using a few clusters never do.
		s.sc = cache.NewSnapshotCache(false, cache.IDHash{}, nil)
		if err := s.setSnapshot(ctx, 0); err != nil {
			cancel()
			return nil, err
		}
		cb := serverv3.CallbackFuncs{
			StreamResponseFunc: func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, r *discovery.DiscoveryResponse) {
				s.sent.Add(uint64(len(r.GetResources())))
			},
			StreamDeltaResponseFunc: func(_ int64, _ *discovery.DeltaDiscoveryRequest, r *discovery.DeltaDiscoveryResponse) {
				s.sent.Add(uint64(len(r.GetResources())))
			},
		}
		xs := serverv3.NewServer(ctx, s.sc, cb)
		gs := grpc.NewServer(grpc.MaxConcurrentStreams(1 << 20))
		discovery.RegisterAggregatedDiscoveryServiceServer(gs, xs)
		go func() {
			err := gs.Serve(lis)
			if errors.Is(err, grpc.ErrServerStopped) {
				err = nil
			}
			s.done <- err
		}()
		go func() { <-ctx.Done(); gs.Stop() }()
	default:
		cancel()
		return nil, fmt.Errorf("unknown target %q", target)
	}
	s.wg.Add(1)
	go s.applier(ctx)
	return s, nil
}

func nodeID(i int) string { return fmt.Sprintf("node-%d", i) }

// setSnapshot is the baseline's update: every service translated again, a
// new snapshot with a new version, set for every node.
func (s *server) setSnapshot(ctx context.Context, seq int) error {
	clusters := make([]types.Resource, s.services)
	loads := make([]types.Resource, s.services)
	for i := range s.services {
		r, _ := translate.Service(service(i, s.endpoints, s.markers[i]))
		clusters[i], loads[i] = r.Cluster, r.Load
	}
	snap, err := cache.NewSnapshot("s"+strconv.Itoa(seq), map[resource.Type][]types.Resource{
		resource.ClusterType:  clusters,
		resource.EndpointType: loads,
	})
	if err != nil {
		return err
	}
	for _, n := range s.nodes {
		if err := s.sc.SetSnapshot(ctx, n, snap); err != nil {
			return err
		}
	}
	if snap.VersionMap != nil {
		s.hashed.Add(uint64(2 * s.services))
	}
	return nil
}

func (s *server) Addr() string { return s.lis.Addr().String() }

func (s *server) Change(seq, svc int) error {
	s.mu.Lock()
	s.pending = append(s.pending, change{seq, svc})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

func (s *server) applier(ctx context.Context) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		s.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		touched := map[int]bool{}
		last := 0
		for _, c := range batch {
			s.markers[c.svc] = c.seq
			touched[c.svc] = true
			last = c.seq
		}
		var err error
		if s.bc != nil {
			// What the merge loop hands the cache for a dirty service: its
			// cluster and load assignment, translated again.
			changed := make([]translate.Resources, 0, len(touched))
			for svc := range touched {
				r, _ := translate.Service(service(svc, s.endpoints, s.markers[svc]))
				changed = append(changed, r)
			}
			err = s.bc.PublishServices(changed, nil)
		} else {
			err = s.setSnapshot(ctx, last)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "xdsload: applying changes:", err)
			continue
		}
		s.versions.Add(uint64(len(touched)))
		s.changes.Add(int64(len(batch)))
		s.batches.Add(1)
	}
}

func (s *server) Stats() (serverStats, error) {
	st := serverStats{
		Target: s.target, Goroutines: runtime.NumGoroutine(),
		Changes: s.changes.Load(), Batches: s.batches.Load(), Versions: s.versions.Load(),
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		st.CPUSeconds = tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
		st.MaxRSSBytes = ru.Maxrss * 1024
	}
	st.RSSBytes = procRSS()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st.HeapBytes = ms.HeapAlloc
	if s.bc != nil {
		cs := s.bc.Stats()
		st.Encodings = cs.Marshals
	} else {
		st.Encodings = s.sent.Load() + s.hashed.Load()
	}
	return st, nil
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

// procRSS is VmRSS of this process, from /proc.
func procRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func (s *server) Close() error {
	s.cancel()
	s.wg.Wait()
	return <-s.done
}

// serveMain is "xdsload serve": the serving side in its own process, so
// its CPU and memory are measured apart from the simulated clients. It
// prints "ADDR host:port", then reads commands on stdin, one a line:
// "C seq svc" (apply a change), "S" (print the stats as one JSON line),
// "Q" (exit).
func serveMain(args []string, in io.Reader, out io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	target := fs.String("target", targetBridge, "bridge or baseline")
	services := fs.Int("services", 100, "services")
	endpoints := fs.Int("endpoints", 10, "endpoints per service")
	clients := fs.Int("clients", 100, "clients (baseline: nodes to set snapshots for)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the serving process to this file, and a heap profile (after a GC) next to it at each stats command: FILE.heapN")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	s, err := startServer(*target, *services, *endpoints, *clients)
	if err != nil {
		fmt.Fprintln(os.Stderr, "xdsload serve:", err)
		return 1
	}
	if addr := os.Getenv("XDSLOAD_PPROF"); addr != "" {
		go func() { fmt.Fprintln(os.Stderr, "xdsload serve: pprof:", http.ListenAndServe(addr, nil)) }()
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, "ADDR %s\n", s.Addr())
	w.Flush()
	sc := bufio.NewScanner(in)
	heaps := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "C":
			if len(f) == 3 {
				seq, _ := strconv.Atoi(f[1])
				svc, _ := strconv.Atoi(f[2])
				if svc >= 0 && svc < *services {
					_ = s.Change(seq, svc)
				}
			}
		case "S":
			st, _ := s.Stats()
			if *cpuprofile != "" {
				heaps++
				writeHeapProfile(fmt.Sprintf("%s.heap%d", *cpuprofile, heaps))
			}
			b, _ := json.Marshal(st)
			w.Write(b)
			w.WriteString("\n")
			w.Flush()
		case "Q":
			return closeServer(s)
		}
	}
	return closeServer(s)
}

func closeServer(s *server) int {
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintln(os.Stderr, "xdsload serve:", err)
			return 1
		}
	case <-time.After(10 * time.Second):
	}
	return 0
}

// writeHeapProfile writes the live heap (after a collection) to path.
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "xdsload serve:", err)
		return
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "xdsload serve:", err)
	}
}
