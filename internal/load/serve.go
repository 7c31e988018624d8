// The serving side: one server per target, its change applier, its
// counters, and "xdsload serve", which runs it in a child process.

package load

import (
	"bufio"
	"context"
	"encoding/json"
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

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// Targets.
const (
	// TargetBridge is the bridge's serving path: its cache and xDS server,
	// as the app builds them (xds.NewServing).
	TargetBridge = "bridge"
	// TargetBaseline is go-control-plane's SnapshotCache (baseline.go);
	// "snapshot" names it too.
	TargetBaseline = "baseline"
	// TargetLinear is go-control-plane's LinearCache, one per type
	// (baseline_linear.go).
	TargetLinear = "linear"
	// TargetFloor is the least a server must do for these clients: each
	// resource version encoded once, responses assembled from those
	// bytes, ACKs read by hand (baseline_floor.go). A measuring stick for
	// what gRPC-go and the runtime cost, not a control plane.
	TargetFloor = "floor"
)

// targetAliases are other names of targets.
var targetAliases = map[string]string{"snapshot": TargetBaseline}

// ServerStats are the serving side's counters. CPU and RSS come from
// getrusage(RUSAGE_SELF) of the process the server runs in: the child
// process ("xdsload serve"), or the whole harness with -inprocess.
type ServerStats struct {
	Target      string  `json:"target"`
	InProcess   bool    `json:"in_process"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	MaxRSSBytes int64   `json:"max_rss_bytes"`
	RSSBytes    int64   `json:"rss_bytes"`
	HeapBytes   uint64  `json:"heap_bytes"`
	Goroutines  int     `json:"goroutines"`
	Changes     int64   `json:"changes"`  // changes applied
	Batches     int64   `json:"batches"`  // publishes (bridge), snapshots (baseline) or batches applied
	Versions    uint64  `json:"versions"` // resource versions created by the changes
	// Encodings: the bridge cache's count of resource encodings; for the
	// baseline, the resources in responses sent (go-control-plane encodes
	// each resource of each response) plus the resources hashed for delta
	// version maps (one encoding each, per snapshot); for the floor, its
	// resources encoded (one proto.Marshal each).
	Encodings uint64 `json:"encodings"`
}

// backend is what one target serves from.
type backend interface {
	// apply serves the services touched by a batch of changes, each at
	// its marker in markers; last is the batch's last change.
	apply(ctx context.Context, touched []int, markers []int, last int) error
	// encodings is the count of resource encodings so far (ServerStats).
	encodings() uint64
}

// server is the serving side of one target: a backend on a listener.
// Changes are queued and applied by one goroutine; whatever queued while it
// was busy is applied as one batch.
type server struct {
	target              string
	services, endpoints int

	lis    net.Listener
	cancel context.CancelFunc
	done   chan error
	wg     sync.WaitGroup
	be     backend

	mu      sync.Mutex
	pending []change
	wake    chan struct{}

	markers []int // owned by the applier

	changes, batches atomic.Int64
	versions         atomic.Uint64
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
	switch target {
	case TargetBridge:
		s.be, err = startBridge(ctx, lis, services, endpoints, s.done)
	case TargetBaseline:
		s.be, err = startBaseline(ctx, lis, services, endpoints, clients, s.done)
	case TargetLinear:
		s.be, err = startLinear(ctx, lis, services, endpoints, s.done)
	case TargetFloor:
		s.be, err = startFloor(ctx, lis, services, endpoints, s.done)
	default:
		err = fmt.Errorf("unknown target %q", target)
	}
	if err != nil {
		cancel()
		lis.Close()
		return nil, err
	}
	s.wg.Add(1)
	go s.applier(ctx)
	return s, nil
}

func nodeID(i int) string { return fmt.Sprintf("node-%d", i) }

// bridge is the bridge's serving path: the cache and server the app
// serves from, fed as the merge loop feeds them (translate, PublishServices).
type bridge struct {
	c         *xds.Cache
	endpoints int
}

func startBridge(ctx context.Context, lis net.Listener, services, endpoints int, done chan<- error) (*bridge, error) {
	c, srv := xds.NewServing(xds.ServingConfig{Options: xds.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	all := make([]translate.Resources, services)
	for i := range services {
		all[i], _ = translate.Service(service(i, endpoints, 0))
	}
	if err := c.PublishServices(all, nil); err != nil {
		return nil, err
	}
	c.MarkReady()
	go func() { done <- srv.Run(ctx, lis) }()
	return &bridge{c: c, endpoints: endpoints}, nil
}

// apply is what the merge loop hands the cache for the dirty services:
// their clusters and load assignments, translated again.
func (b *bridge) apply(_ context.Context, touched, markers []int, _ int) error {
	changed := make([]translate.Resources, 0, len(touched))
	for _, svc := range touched {
		r, _ := translate.Service(service(svc, b.endpoints, markers[svc]))
		changed = append(changed, r)
	}
	return b.c.PublishServices(changed, nil)
}

func (b *bridge) encodings() uint64 { return b.c.Stats().Marshals }

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
		seen := map[int]bool{}
		var touched []int
		last := 0
		for _, c := range batch {
			s.markers[c.svc] = c.seq
			if !seen[c.svc] {
				seen[c.svc] = true
				touched = append(touched, c.svc)
			}
			last = c.seq
		}
		if err := s.be.apply(ctx, touched, s.markers, last); err != nil {
			fmt.Fprintln(os.Stderr, "xdsload: applying changes:", err)
			continue
		}
		s.versions.Add(uint64(len(touched)))
		s.changes.Add(int64(len(batch)))
		s.batches.Add(1)
	}
}

func (s *server) Stats() (ServerStats, error) {
	st := ServerStats{
		Target: s.target, Goroutines: runtime.NumGoroutine(),
		Changes: s.changes.Load(), Batches: s.batches.Load(), Versions: s.versions.Load(),
		Encodings: s.be.encodings(),
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		st.CPUSeconds = cpuSecondsOf(&ru)
		st.MaxRSSBytes = ru.Maxrss * 1024
	}
	// The peak is VmHWM where there is one: Linux carries a process's
	// maximum RSS in getrusage across exec, and Go starts a child with
	// vfork, so a serving child's ru_maxrss was at least the harness's own
	// peak when it started it (a curve's later points and a run's later
	// targets read 580 MB where VmHWM says 325 MB).
	if hwm := procStatus("VmHWM:"); hwm > 0 {
		st.MaxRSSBytes = hwm
	}
	st.RSSBytes = procStatus("VmRSS:")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st.HeapBytes = ms.HeapAlloc
	return st, nil
}

// cpuSeconds is this process's CPU seconds (0 if unknown).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return cpuSecondsOf(&ru)
}

func cpuSecondsOf(ru *syscall.Rusage) float64 { return tvSeconds(ru.Utime) + tvSeconds(ru.Stime) }

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

// procStatus is a size field of /proc/self/status (VmRSS:, VmHWM:) in
// bytes; 0 without one.
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field); ok {
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

// ServeMain is "xdsload serve": the serving side in its own process, so
// its CPU and memory are measured apart from the simulated clients. It
// prints "ADDR host:port", then reads commands on stdin, one a line:
// "C seq svc" (apply a change), "S" (print the stats as one JSON line),
// "U" (the CPU seconds only: no heap profile, which "S" writes when
// profiled, and no stop of the world to read the memory statistics),
// "P path" (end the CPU profile and start one into path; "P": none),
// "Q" (exit).
func ServeMain(args []string, in io.Reader, out io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	target := fs.String("target", TargetBridge, "bridge, baseline, linear or floor")
	services := fs.Int("services", 100, "services")
	endpoints := fs.Int("endpoints", 10, "endpoints per service")
	clients := fs.Int("clients", 100, "clients (baseline: nodes to set snapshots for)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the serving process to this file (until a P command names another), and a heap profile (after a GC) next to it at each S command: FILE.heapN")
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
	var prof cpuProfile
	defer prof.stop()
	prof.start(*cpuprofile)
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
		case "S", "U":
			var st ServerStats
			if f[0] == "U" {
				st.CPUSeconds = cpuSeconds()
			} else {
				st, _ = s.Stats()
			}
			if *cpuprofile != "" && f[0] == "S" {
				heaps++
				writeHeapProfile(fmt.Sprintf("%s.heap%d", *cpuprofile, heaps))
			}
			b, _ := json.Marshal(st)
			w.Write(b)
			w.WriteString("\n")
			w.Flush()
		case "P":
			prof.stop()
			// The rest of the line: a path may hold spaces.
			prof.start(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "P")))
		case "Q":
			return closeServer(s)
		}
	}
	return closeServer(s)
}

// cpuProfile is the serving process's CPU profile, if one is running.
type cpuProfile struct{ f *os.File }

func (p *cpuProfile) start(path string) {
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "xdsload serve:", err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "xdsload serve:", err)
		f.Close()
		return
	}
	p.f = f
}

func (p *cpuProfile) stop() {
	if p.f != nil {
		pprof.StopCPUProfile()
		p.f.Close()
		p.f = nil
	}
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
