package xds_test

// Measurements of what an abusive client costs the server, run only with
// XDSBRIDGE_ABUSE_MEASURE=1:
//
//	XDSBRIDGE_ABUSE_MEASURE=1 go test -count=1 -run 'TestMeasure' -v ./xds
//
// (=all adds what the limits let a connection keep, and the transient
// cost under a smaller max_recv_message_bytes.)
//
// The server runs in a child process (this test binary, running
// TestMeasureServerChild), so its RSS and heap are the server's alone.
// This file uses only NewCache, NewServer, Options{} and Run, so that it
// also runs unchanged against a server without limits.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdsbridge/xdsbridge/xds"
)

// TestMeasureServerChild is the server of the measurements: it prints its
// address, then answers each "heap" line on stdin with its live heap after
// a GC, and exits when stdin closes.
func TestMeasureServerChild(t *testing.T) {
	if os.Getenv("XDSBRIDGE_MEASURE_CHILD") == "" {
		t.Skip("the measurements' server process")
	}
	c := xds.NewCache()
	c.MarkReady()
	opts := xds.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	// XDSBRIDGE_MEASURE_LIMITS: Options.Limits as JSON (set by reflection,
	// so that this file compiles against a server without limits).
	if l := os.Getenv("XDSBRIDGE_MEASURE_LIMITS"); l != "" {
		f := reflect.ValueOf(&opts).Elem().FieldByName("Limits")
		if !f.IsValid() {
			t.Fatal("this server has no Options.Limits")
		}
		if err := json.Unmarshal([]byte(l), f.Addr().Interface()); err != nil {
			t.Fatal(err)
		}
	}
	s := xds.NewServer(c, opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Run(context.Background(), lis)
	fmt.Println("addr", lis.Addr())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		// Twice: pooled buffers survive one collection (sync.Pool's victim
		// cache).
		runtime.GC()
		runtime.GC()
		if f := os.Getenv("XDSBRIDGE_MEASURE_HEAPPROFILE"); f != "" {
			if w, err := os.Create(f); err == nil {
				pprof.WriteHeapProfile(w)
				w.Close()
			}
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Println("heap", ms.HeapAlloc+ms.StackInuse)
	}
	os.Exit(0)
}

type measuredServer struct {
	t    *testing.T
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	addr string
}

func startMeasuredServer(t *testing.T, limits string) *measuredServer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMeasureServerChild$")
	cmd.Env = append(os.Environ(), "XDSBRIDGE_MEASURE_CHILD=1", "XDSBRIDGE_MEASURE_LIMITS="+limits)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &measuredServer{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	for m.out.Scan() {
		if a, ok := strings.CutPrefix(m.out.Text(), "addr "); ok {
			m.addr = a
			return m
		}
	}
	t.Fatal("server child gave no address")
	return nil
}

// heap is the child's live heap after a GC, plus its goroutine stacks.
func (m *measuredServer) heap() int64 {
	fmt.Fprintln(m.in, "heap")
	for m.out.Scan() {
		if v, ok := strings.CutPrefix(m.out.Text(), "heap "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	m.t.Fatal("no heap figure")
	return 0
}

// status returns a field of the child's /proc status in bytes (VmRSS,
// VmHWM: peak RSS).
func (m *measuredServer) status(field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		m.t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (m *measuredServer) dial() *grpc.ClientConn {
	conn, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { conn.Close() })
	return conn
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

func measureNames(n, size int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		s := fmt.Sprintf("%s-%06d-", prefix, i)
		out[i] = s + strings.Repeat("x", max(size-len(s), 0))
	}
	return out
}

// streams opens n delta streams on conns (round robin), each sending req,
// with workers at once; it returns when each got a response or ended, and
// how many got a response. The streams stay open until ctx is done.
func measureStreams(ctx context.Context, conns []*grpc.ClientConn, n, workers int, req *discovery.DeltaDiscoveryRequest, ack bool) (served int64) {
	var wg sync.WaitGroup
	var next atomic.Int64
	var ok atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				st, err := discovery.NewAggregatedDiscoveryServiceClient(conns[int(i)%len(conns)]).DeltaAggregatedResources(ctx)
				if err != nil {
					continue
				}
				if st.Send(req) != nil {
					continue
				}
				if r, err := st.Recv(); err == nil {
					ok.Add(1)
					if ack {
						st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
					}
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load()
}

// The patterns on one connection: 200 delta streams each
// subscribing to 3,900 made-up 1 KB names; then 10,000 streams.
func TestMeasureAbuse(t *testing.T) {
	if os.Getenv("XDSBRIDGE_ABUSE_MEASURE") == "" {
		t.Skip("set XDSBRIDGE_ABUSE_MEASURE=1")
	}
	run := func(what, limits string, n, workers int, req *discovery.DeltaDiscoveryRequest) {
		m := startMeasuredServer(t, limits)
		conn := m.dial()
		heap0, rss0 := m.heap(), m.status("VmRSS")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()
		served := measureStreams(ctx, []*grpc.ClientConn{conn}, n, workers, req, false)
		took := time.Since(start)
		time.Sleep(500 * time.Millisecond)
		if limits != "" {
			what += " (limits " + limits + ")"
		}
		t.Logf("%s: %d of %d streams served in %v; server RSS %s before, peak %s, %s after; live heap %s before, %s after (streams still open)",
			what, served, n, took.Round(time.Millisecond), mb(rss0), mb(m.status("VmHWM")), mb(m.status("VmRSS")), mb(heap0), mb(m.heap()))
	}
	sub := func(n, size int) *discovery.DeltaDiscoveryRequest {
		return &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, Node: &core.Node{Id: "abuser"}, ResourceNamesSubscribe: measureNames(n, size, "abuse")}
	}
	run("200 streams × 3,900 × 1 KB names", "", 200, 200, sub(3900, 1024))
	run("10,000 streams", "", 10000, 200, &discovery.DeltaDiscoveryRequest{TypeUrl: xds.ClusterType, Node: &core.Node{Id: "abuser"}})
	// 16 streams whose headers decode to 12 MB each, HPACK-amplified;
	// 16 MiB is gRPC's own default (before max_header_bytes).
	for _, limits := range []string{`{"max_header_bytes": 16777216}`, ""} {
		m := startMeasuredServer(t, limits)
		heap0, rss0 := m.heap(), m.status("VmRSS")
		reset, closed, wrote, c := rawHeaderStreams(t, m.addr, 16, 12<<20, true, 3*time.Second)
		t.Logf("16 streams × 12 MB of amplified headers (limits %q): %d bytes sent, %d streams reset, connection closed %v; server RSS %s before, peak %s; live heap %s before, %s after (connection still open)",
			limits, wrote, reset, closed, mb(rss0), mb(m.status("VmHWM")), mb(heap0), mb(m.heap()))
		c.Close()
	}
	if os.Getenv("XDSBRIDGE_ABUSE_MEASURE") != "all" {
		return
	}
	// What the limits let one connection keep: its names at the
	// per-connection bounds.
	run("16 streams × 6,250 × 16-byte names", "", 16, 16, sub(6250, 16))
	run("2 streams × 2,000 × 1,000-byte names", "", 2, 2, sub(2000, 1000))
	// The transient cost scales with max_recv_message_bytes.
	run("200 streams × 3,900 × 1 KB names", `{"max_recv_message_bytes": 1048576}`, 200, 200, sub(3900, 1024))
	run("200 streams × 1,000 × 1 KB names", `{"max_recv_message_bytes": 1048576}`, 200, 200, sub(1000, 1024))
}

// The heap one subscribed name and one stream cost the server: live heap
// after GC with streams open, minus before (see PerNameOverheadBytes).
func TestMeasurePerNameOverhead(t *testing.T) {
	if os.Getenv("XDSBRIDGE_ABUSE_MEASURE") == "" {
		t.Skip("set XDSBRIDGE_ABUSE_MEASURE=1")
	}
	m := startMeasuredServer(t, "")
	// 80 connections for the 1,000 streams (12 or 13 each, under
	// max_streams_per_connection); the names then go on 16 of them.
	var conns []*grpc.ClientConn
	for range 80 {
		conns = append(conns, m.dial())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := m.heap()
	const streams = 1000
	measureStreams(ctx, conns, streams, 16, &discovery.DeltaDiscoveryRequest{TypeUrl: xds.ClusterType, Node: &core.Node{Id: "s"}}, true)
	perStream := float64(m.heap()-base) / streams
	t.Logf("per stream (delta, wildcard CDS, no resources): %.0f bytes", perStream)

	for _, ack := range []bool{false, true} {
		perName := map[int]float64{}
		conns := conns[:16]
		for _, c := range []struct{ size, n int }{{16, 20000}, {1000, 1900}} {
			before := m.heap()
			sctx, scancel := context.WithCancel(ctx)
			for i, conn := range conns {
				measureStreams(sctx, []*grpc.ClientConn{conn}, 1, 1, &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, Node: &core.Node{Id: "s"},
					ResourceNamesSubscribe: measureNames(c.n, c.size, fmt.Sprint("c", i))}, ack)
			}
			time.Sleep(100 * time.Millisecond) // the ACKs
			total := len(conns) * c.n
			perName[c.size] = (float64(m.heap()-before) - perStream*float64(len(conns))) / float64(total)
			t.Logf("ACKed %v, %d-byte names: %.0f bytes of heap per name (%d names on %d streams)", ack, c.size, perName[c.size], total, len(conns))
			scancel()
			time.Sleep(300 * time.Millisecond)
		}
		slope := (perName[1000] - perName[16]) / (1000 - 16)
		t.Logf("ACKed %v: per name %.2f × its bytes + %.0f bytes", ack, slope, perName[16]-16*slope)
	}
}
