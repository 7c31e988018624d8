package xds_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// limitHarness is a harness whose server has opts, and can dial more
// connections.
type limitHarness struct {
	*harness
	addr string
	reg  *prometheus.Registry
}

func newLimitHarness(t *testing.T, opts xds.Options) *limitHarness {
	t.Helper()
	c := xds.NewCache()
	c.MarkReady()
	reg := prometheus.NewRegistry()
	opts.Metrics = reg
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := xds.NewServer(c, opts)
	addr := runServer(t, s)
	h := &limitHarness{addr: addr, reg: reg, harness: &harness{t: t, cache: c, srv: s}}
	h.conn = h.dial()
	return h
}

// dial opens another connection to the server, closed at the test's end.
func (h *limitHarness) dial() *grpc.ClientConn {
	h.t.Helper()
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	return conn
}

func (h *limitHarness) refusals(limit string) int {
	return int(metricVec(h.t, h.reg, "xdsbridge_xds_limit_refusals_total", "limit", limit))
}

// metric reads the counter name whose labels include the pairs (label,
// value, ...), and whether there is one.
func metric(t *testing.T, reg *prometheus.Registry, name string, pairs ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(pairs); i += 2 {
				if got[pairs[i]] != pairs[i+1] {
					continue metrics
				}
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// metricVec reads one labelled counter; it must exist.
func metricVec(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	v, ok := metric(t, reg, name, label, value)
	if !ok {
		t.Fatalf("no metric %s{%s=%q}", name, label, value)
	}
	return v
}

// counterValue reads an unlabelled counter; it must exist.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, ok := metric(t, reg, name)
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return v
}

// rawDelta opens a delta ADS stream on conn, sends req, and reports how
// the stream went: nil if a response came, else the stream's error.
func rawDelta(ctx context.Context, conn *grpc.ClientConn, req *discovery.DeltaDiscoveryRequest) (discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, error) {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(req); err != nil && err != io.EOF {
		return nil, err
	}
	if _, err := st.Recv(); err != nil {
		return nil, err
	}
	return st, nil
}

// rawCodec lets a test client send a request encoded once, as bytes
// (wire), on many streams; everything else is proto. (Encoding a 4 MB
// request for each of 200 streams is most of a test's time under -race.)
type rawCodec struct{}

// wire is encoded protobuf: concatenated encodings decode as one merged
// message.
type wire mem.BufferSlice

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(wire); ok {
		return mem.BufferSlice(w), nil
	}
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func encode(t *testing.T, m proto.Message) mem.SliceBuffer {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawDeltaWire is rawDelta sending w.
func rawDeltaWire(ctx context.Context, conn *grpc.ClientConn, w wire) error {
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
		"/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	if err := st.SendMsg(w); err != nil && err != io.EOF {
		return err
	}
	return st.RecvMsg(new(discovery.DeltaDiscoveryResponse))
}

// wantLimit checks err is code with a message naming the config field.
func wantLimit(t *testing.T, err error, code codes.Code, field string) {
	t.Helper()
	st := grpcstatus.Convert(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), "xds.limits."+field+" (") {
		t.Fatalf("got %v; want %v naming xds.limits.%s", err, code, field)
	}
}

func madeUpNames(n, size int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		s := fmt.Sprintf("%s-%06d-", prefix, i)
		out[i] = s + strings.Repeat("x", size-len(s))
	}
	return out
}

// The 200 streams on one connection: 16 (the default) are served,
// the others refused with an error naming the limit, and counted; another
// connection is not affected.
func TestLimitStreamsPerConnection(t *testing.T) {
	h := newLimitHarness(t, xds.Options{})
	h.publish([]translate.Resources{svc("a", 1001)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	served, refused := 0, 0
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rawDelta(ctx, h.conn, &discovery.DeltaDiscoveryRequest{TypeUrl: cds, Node: &core.Node{Id: "n"}})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				served++
				return
			}
			wantLimit(t, err, codes.ResourceExhausted, "max_streams_per_connection")
			refused++
		}()
	}
	wg.Wait()
	if served != xds.DefaultMaxStreamsPerConnection || refused != 200-served {
		t.Fatalf("served %d, refused %d; want %d served", served, refused, xds.DefaultMaxStreamsPerConnection)
	}
	if n := h.refusals("max_streams_per_connection"); n != refused {
		t.Fatalf("counted %d refusals, saw %d", n, refused)
	}
	if _, err := rawDelta(ctx, h.dial(), &discovery.DeltaDiscoveryRequest{TypeUrl: cds, Node: &core.Node{Id: "n2"}}); err != nil {
		t.Fatalf("another connection: %v", err)
	}
}

// The 10,000 streams on one connection: never more than the limit
// open; every one past it refused. And max_streams over connections.
func TestLimitTenThousandStreams(t *testing.T) {
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxStreams: 20}})
	h.publish([]translate.Resources{svc("a", 1001)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const attempts, workers = 10000, 40
	var mu sync.Mutex
	served, refused := 0, 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range attempts / workers {
				_, err := rawDelta(ctx, h.conn, &discovery.DeltaDiscoveryRequest{TypeUrl: cds, Node: &core.Node{Id: fmt.Sprint("n", w)}})
				mu.Lock()
				if err == nil {
					served++
				} else if c := grpcstatus.Code(err); c == codes.ResourceExhausted {
					refused++
				} else {
					t.Errorf("stream: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if served != xds.DefaultMaxStreamsPerConnection || served+refused != attempts {
		t.Fatalf("served %d, refused %d of %d", served, refused, attempts)
	}
	if n := len(h.srv.ClientStatuses()); n != served {
		t.Fatalf("%d streams open on the server, want %d", n, served)
	}
	// 4 more on a second connection: the server's 20 are reached.
	conn2 := h.dial()
	got := 0
	for range 20 {
		if _, err := rawDelta(ctx, conn2, &discovery.DeltaDiscoveryRequest{TypeUrl: cds}); err == nil {
			got++
		} else {
			wantLimit(t, err, codes.ResourceExhausted, "max_streams")
		}
	}
	if got != 20-served {
		t.Fatalf("second connection got %d streams, want %d", got, 20-served)
	}
	if n := h.refusals("max_streams"); n != 20-got {
		t.Fatalf("max_streams refusals counted %d, want %d", n, 20-got)
	}
}

// The 200 streams × 3,900 made-up 1 KB names: every stream is
// ended (or refused) and the server keeps none of it.
func TestLimitNamesAbuse(t *testing.T) {
	h := newLimitHarness(t, xds.Options{})
	req := wire{encode(t, &discovery.DeltaDiscoveryRequest{TypeUrl: eds, Node: &core.Node{Id: "abuser"}, ResourceNamesSubscribe: madeUpNames(3900, 1024, "abuse")})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	byLimit := map[string]int{}
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := rawDeltaWire(ctx, h.conn, req)
			msg := grpcstatus.Convert(err).Message()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				t.Error("a stream was served")
			case strings.Contains(msg, "xds.limits.max_name_bytes_per_stream (2097152) reached"):
				byLimit["max_name_bytes_per_stream"]++
			case strings.Contains(msg, fmt.Sprintf("xds.limits.max_streams_per_connection (%d) reached", xds.DefaultMaxStreamsPerConnection)):
				byLimit["max_streams_per_connection"]++
			default:
				t.Errorf("stream ended with %v", err)
			}
		}()
	}
	wg.Wait()
	t.Logf("ended by limit: %v", byLimit)
	if byLimit["max_name_bytes_per_stream"] < xds.DefaultMaxStreamsPerConnection || byLimit["max_name_bytes_per_stream"] != h.refusals("max_name_bytes_per_stream") {
		t.Fatalf("ended for name bytes: %d (counted %d), want at least %d", byLimit["max_name_bytes_per_stream"], h.refusals("max_name_bytes_per_stream"), xds.DefaultMaxStreamsPerConnection)
	}
	waitFor(t, "no streams left", func() bool { return len(h.srv.ClientStatuses()) == 0 })
}

// A client that keeps each stream under the per-stream bound is stopped
// by the connection's; a stream's names are released when it ends.
func TestLimitNameBytesPerConnection(t *testing.T) {
	h := newLimitHarness(t, xds.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := func(ctx context.Context, prefix string) error {
		_, err := rawDelta(ctx, h.conn, &discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: madeUpNames(1500, 1024, prefix)})
		return err
	}
	ctx1, cancel1 := context.WithCancel(ctx)
	for _, p := range []string{"a", "b"} {
		c := ctx
		if p == "a" {
			c = ctx1
		}
		if err := sub(c, p); err != nil {
			t.Fatalf("stream %s under the limits: %v", p, err)
		}
	}
	wantLimit(t, sub(ctx, "c"), codes.ResourceExhausted, "max_name_bytes_per_connection")
	cl := h.srv.ClientStatuses()
	if len(cl) != 2 || cl[0].NameBytes < 1500*1024 || cl[0].SubscribedNames < 1500 ||
		cl[0].EstimatedBytes < 2*cl[0].NameBytes+cl[0].SubscribedNames*xds.PerNameOverheadBytes {
		t.Fatalf("clients: %+v", cl)
	}
	cancel1()
	waitFor(t, "stream a closed", func() bool { return len(h.srv.ClientStatuses()) == 1 })
	if err := sub(ctx, "d"); err != nil {
		t.Fatalf("after stream a ended: %v", err)
	}
}

// Names are counted exactly: a delta stream's unsubscribes and a sotw
// stream's replaced lists free their names.
func TestLimitNamesPerStreamExact(t *testing.T) {
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxNamesPerStream: 100}})
	h.publish([]translate.Resources{svc("a", 1001)})
	n := madeUpNames(151, 16, "n")
	d := h.delta("d")
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: n[:100]})
	d.recv()
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: n[100:150], ResourceNamesUnsubscribe: n[:50]})
	d.recv()
	// 100 again, one of them re-subscribed: no change in count.
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: n[60:61]})
	// Another type has its own count.
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: n[:100]})
	d.recv()
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: n[:1]})
	<-d.ended
	wantLimit(t, d.err, codes.ResourceExhausted, "max_names_per_stream")

	s := h.sotw()
	for i := range 5 {
		s.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: n[i*10 : i*10+100]})
	}
	s.recv()
	s.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: n[:101]})
	<-s.ended
	wantLimit(t, s.err, codes.ResourceExhausted, "max_names_per_stream")
}

// A node over max_node_bytes, and a message over max_recv_message_bytes,
// end the stream, counted.
func TestLimitNodeAndMessageSize(t *testing.T) {
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxNodeBytes: 16 << 10, MaxRecvMessageBytes: 256 << 10}})
	big, _ := structpb.NewStruct(map[string]any{"blob": strings.Repeat("m", 20<<10)})
	d := h.delta("n")
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, Node: &core.Node{Id: "big", Metadata: big}})
	<-d.ended
	wantLimit(t, d.err, codes.InvalidArgument, "max_node_bytes")

	d = h.delta("n")
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: madeUpNames(300, 1024, "m")})
	<-d.ended
	// gRPC answers with its own message ("grpc: received message larger
	// than max (308181 vs. 262144)"); the guard counts it.
	if st := grpcstatus.Convert(d.err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "vs. 262144") {
		t.Fatalf("got %v; want ResourceExhausted for the message size", d.err)
	}
	if h.refusals("max_node_bytes") != 1 || h.refusals("max_recv_message_bytes") != 1 {
		t.Fatal("refusals not counted")
	}
}

// A stream flooding requests is read at requests_per_second after its
// burst: it is slowed, not refused.
func TestLimitRequestRate(t *testing.T) {
	const rps, burst, total = 100, 20, 150
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{RequestsPerSecond: rps, RequestBurst: burst}})
	d := h.delta("n")
	start := time.Now()
	for i := range total {
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResponseNonce: fmt.Sprint("f", i), ErrorDetail: &status.Status{Message: "flood"}})
	}
	// The NACKs counted are the requests read (distinct nonces).
	for range 3 {
		time.Sleep(200 * time.Millisecond)
		n := h.srv.NACKs()
		elapsed := time.Since(start).Seconds()
		if max := burst + rps*elapsed + 1; float64(n) > max {
			t.Fatalf("%d requests read in %.2fs; the bucket allows %.0f", n, elapsed, max)
		}
	}
	waitFor(t, "every request read", func() bool { return h.srv.NACKs() == total })
	if d := counterValue(t, h.reg, "xdsbridge_xds_requests_delayed_total"); d < total-burst-rps*time.Since(start).Seconds() || d == 0 {
		t.Fatalf("delayed counted %v", d)
	}
	select {
	case <-d.ended:
		t.Fatalf("stream ended: %v", d.err)
	default:
	}
}

// The 200 NACKs with 1 MiB details on one stream, each nonce sent
// twice: counted once each, logged nack_logs_per_minute times with 1 KiB
// of detail at most.
func TestLimitNACKFlood(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	h := newLimitHarness(t, xds.Options{Logger: log})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := h.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
		"/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	nack := encode(t, &discovery.DeltaDiscoveryRequest{TypeUrl: eds, Node: &core.Node{Id: "n"}, ErrorDetail: &status.Status{Message: strings.Repeat("e", 1<<20)}})
	for i := range 200 {
		if err := st.SendMsg(wire{nack, encode(t, &discovery.DeltaDiscoveryRequest{ResponseNonce: fmt.Sprint("n", i/2)})}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "100 NACKs", func() bool { return h.srv.NACKs() == 100 })
	// The last request repeats the nonce of the 100th NACK: it is counted
	// after it.
	waitFor(t, "100 repeated NACKs", func() bool {
		return metricVec(t, h.reg, "xdsbridge_xds_nack_logs_suppressed_total", "reason", "repeated") >= 100
	})
	time.Sleep(100 * time.Millisecond) // any further (wrong) count
	if n := h.srv.NACKs(); n != 100 {
		t.Fatalf("%d NACKs counted, want 100", n)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	lines := strings.Count(out, "NACK")
	if lines != xds.DefaultNACKLogsPerMinute || len(out) > lines*(xds.MaxNACKMessageBytes+1024) {
		t.Fatalf("%d lines, %d bytes logged", lines, len(out))
	}
	for reason, want := range map[string]float64{"repeated": 100, "rate": 100 - xds.DefaultNACKLogsPerMinute} {
		if got := metricVec(t, h.reg, "xdsbridge_xds_nack_logs_suppressed_total", "reason", reason); got != want {
			t.Errorf("suppressed{%s} = %v, want %v", reason, got, want)
		}
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Normal Envoy behaviour is not refused under the default limits: 5,000
// clusters by wildcard CDS and named EDS for all of them, over delta and
// sotw.
func TestLimitsLetEnvoyThrough(t *testing.T) {
	h := newLimitHarness(t, xds.Options{})
	const n = 5000
	var all []translate.Resources
	var names []string
	for i := range n {
		name := fmt.Sprintf("service-%04d", i)
		all = append(all, svc(name, 1000+uint32(i%50000)))
		names = append(names, name)
	}
	h.publish(all)

	d := h.delta("envoy")
	collect := func(typeURL string) {
		t.Helper()
		got := map[string]bool{}
		for len(got) < n {
			r := d.recv()
			if r.TypeUrl != typeURL {
				t.Fatalf("got %s, want %s", r.TypeUrl, typeURL)
			}
			for _, res := range r.Resources {
				got[res.Name] = true
			}
			d.ack(r)
		}
	}
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}})
	collect(cds)
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: names})
	collect(eds)

	s := h.sotw()
	version := map[string]string{}
	scollect := func(typeURL string, req []string) {
		t.Helper()
		got := map[string]bool{}
		for len(got) < n {
			r := s.recv()
			if r.TypeUrl != typeURL {
				t.Fatalf("got %s, want %s", r.TypeUrl, typeURL)
			}
			for _, name := range sotwNames(t, r) {
				got[name] = true
			}
			version[typeURL] = r.VersionInfo
			s.send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: req, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
		}
	}
	s.send(&discovery.DiscoveryRequest{TypeUrl: cds})
	scollect(cds, nil)
	s.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: names})
	scollect(eds, names)

	for _, l := range []string{"max_streams", "max_streams_per_connection", "max_names_per_stream", "max_name_bytes_per_stream",
		"max_names_per_connection", "max_name_bytes_per_connection", "max_name_bytes_total", "max_node_bytes", "max_recv_message_bytes",
		"max_unanswered_responses"} {
		if r := h.refusals(l); r != 0 {
			t.Errorf("%s: %d refusals", l, r)
		}
	}
	for _, c := range h.srv.ClientStatuses() {
		if c.SubscribedNames < n || c.EstimatedBytes < 2*c.NameBytes+int64(n)*xds.PerNameOverheadBytes {
			t.Errorf("client %s: %d names, %d bytes, estimate %d", c.Mode, c.SubscribedNames, c.NameBytes, c.EstimatedBytes)
		}
		t.Logf("%s: %d names, %d name bytes, memory estimate %d bytes", c.Mode, c.SubscribedNames, c.NameBytes, c.EstimatedBytes)
	}
}

// The server holds each type's last request until the type's next (its
// nonce, version, error detail...): those bytes count with the names.
func TestLimitHeldRequestBytes(t *testing.T) {
	h := newLimitHarness(t, xds.Options{})
	d := h.delta("n")
	detail := &status.Status{Message: strings.Repeat("e", 768<<10)}
	// Replaced, not added up: the same type again and again.
	for i := range 4 {
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResponseNonce: fmt.Sprint(i), ErrorDetail: detail})
	}
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "e", ErrorDetail: detail})
	waitFor(t, "5 NACKs read", func() bool { return h.srv.NACKs() == 5 })
	select {
	case <-d.ended:
		t.Fatalf("ended: %v", d.err)
	default:
	}
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.ListenerType, ResponseNonce: "l", ErrorDetail: detail})
	<-d.ended
	wantLimit(t, d.err, codes.ResourceExhausted, "max_name_bytes_per_stream")
}

// A client at max_streams_per_connection that closes a stream and opens
// another is served: the closed stream's slot is released when its
// context ends, not when go-control-plane's handler returns.
func TestLimitReopenAtLimit(t *testing.T) {
	h := newLimitHarness(t, xds.Options{})
	h.publish([]translate.Resources{svc("a", 1001)})
	cancels := make([]context.CancelFunc, xds.DefaultMaxStreamsPerConnection)
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	open := func(i int) error {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		_, err := rawDelta(ctx, h.conn, &discovery.DeltaDiscoveryRequest{TypeUrl: cds})
		return err
	}
	for i := range cancels {
		if err := open(i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		cancels[i%len(cancels)]()
		if err := open(i % len(cancels)); err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
	}
	if n := h.refusals("max_streams_per_connection"); n != 0 {
		t.Fatalf("%d refusals", n)
	}
	// Still a limit: one more is refused.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := rawDelta(ctx, h.conn, &discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	wantLimit(t, err, codes.ResourceExhausted, "max_streams_per_connection")
}

// The same for max_streams, over connections.
func TestLimitReopenAtMaxStreams(t *testing.T) {
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxStreams: 4}})
	h.publish([]translate.Resources{svc("a", 1001)})
	conns := []*grpc.ClientConn{h.conn, h.dial()}
	cancels := make([]context.CancelFunc, 4)
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	open := func(i int) error {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		_, err := rawDelta(ctx, conns[i%2], &discovery.DeltaDiscoveryRequest{TypeUrl: cds})
		return err
	}
	for i := range cancels {
		if err := open(i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		cancels[i%4]()
		if err := open(i % 4); err != nil {
			// The reset travels on another connection than the new stream:
			// wait for it to be read, once.
			time.Sleep(50 * time.Millisecond)
			if err := open(i % 4); err != nil {
				t.Fatalf("reopen %d: %v", i, err)
			}
		}
	}
}

// Request headers are bounded by max_header_bytes: streams whose headers
// decode to more are reset by gRPC before the server holds them, literal
// or HPACK-amplified; a grpc-go client with headers under it is served.
func TestLimitHeaderBytes(t *testing.T) {
	h := newLimitHarness(t, xds.Options{})
	h.publish([]translate.Resources{svc("a", 1001)})
	for _, amplified := range []bool{false, true} {
		reset, closed, wrote, c := rawHeaderStreams(t, h.addr, 4, 1<<20, amplified, 5*time.Second)
		c.Close()
		// Amplified, each stream's block is a frame, and its stream is
		// reset; literal, it takes CONTINUATION frames, and the one
		// following the block's going over closes the connection.
		if amplified && reset != 4 || !amplified && !closed {
			t.Errorf("amplified %v: %d of 4 streams reset, connection closed %v", amplified, reset, closed)
		}
		t.Logf("amplified %v: %d bytes sent, %d streams reset, connection closed %v", amplified, wrote, reset, closed)
	}
	if n := len(h.srv.ClientStatuses()); n != 0 {
		t.Fatalf("%d streams served", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ok := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.Repeat("t", 8<<10))
	if _, err := rawDelta(ok, h.conn, &discovery.DeltaDiscoveryRequest{TypeUrl: cds}); err != nil {
		t.Fatalf("8 KiB of headers: %v", err)
	}
	// A grpc-go client does not send more than the server takes.
	big := metadata.AppendToOutgoingContext(ctx, "x-pad", strings.Repeat("v", 32<<10))
	if _, err := rawDelta(big, h.conn, &discovery.DeltaDiscoveryRequest{TypeUrl: cds}); err == nil {
		t.Fatal("32 KiB of headers served")
	}
	// A smaller setting.
	h2 := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxHeaderBytes: 4 << 10}})
	if _, err := rawDelta(metadata.AppendToOutgoingContext(ctx, "x-pad", strings.Repeat("v", 6<<10)), h2.conn, &discovery.DeltaDiscoveryRequest{TypeUrl: cds}); err == nil {
		t.Fatal("6 KiB of headers served under max_header_bytes 4096")
	}
}

// NACKs with made-up type URLs, one per stream, over many streams: the
// metric has no label but the served types and "other", the log cuts the
// type URL, and the server-wide limit (10 × nack_logs_per_minute) bounds
// the lines however many streams.
func TestLimitNACKTypeURLs(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	h := newLimitHarness(t, xds.Options{Logger: log, Limits: xds.Limits{NACKLogsPerMinute: 1}})
	const streams = 20
	for i := range streams {
		d := h.delta(fmt.Sprint("n", i))
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: fmt.Sprintf("type.googleapis.com/x%d", i) + strings.Repeat("A", 64<<10),
			ResponseNonce: "1", ErrorDetail: &status.Status{Message: "bad"}})
		waitFor(t, "the NACK", func() bool { return h.srv.NACKs() == uint64(i+1) })
		d.cancel()
	}
	d := h.delta("served")
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResponseNonce: "1", ErrorDetail: &status.Status{Message: "bad"}})
	waitFor(t, "the NACK", func() bool { return h.srv.NACKs() == streams+1 })

	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if len(l.GetValue()) > 256 {
					t.Errorf("%s{%s}: a label of %d bytes", mf.GetName(), l.GetName(), len(l.GetValue()))
				}
			}
		}
	}
	if got := metricVec2(t, h.reg, "xdsbridge_xds_nacks_total", "other", "delta"); got != streams {
		t.Errorf("nacks{type=other} = %v, want %d", got, streams)
	}
	if got := metricVec2(t, h.reg, "xdsbridge_xds_nacks_total", cds, "delta"); got != 1 {
		t.Errorf("nacks{type=cds} = %v, want 1", got)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	lines := strings.Count(out, "NACK")
	if want := xds.NACKLogsServerFactor * 1; lines != want || len(out) > lines*2048 {
		t.Errorf("%d lines, %d bytes logged; want %d lines", lines, len(out), want)
	}
	if got := metricVec(t, h.reg, "xdsbridge_xds_nack_logs_suppressed_total", "reason", "server_rate"); got != streams+1-xds.NACKLogsServerFactor {
		t.Errorf("suppressed{server_rate} = %v", got)
	}
}

// metricVec2 reads a counter labelled type and mode (0 if none).
func metricVec2(t *testing.T, reg *prometheus.Registry, name, typ, mode string) float64 {
	t.Helper()
	v, _ := metric(t, reg, name, "type", typ, "mode", mode)
	return v
}

// max_name_bytes_total bounds the name bytes over every connection; a
// stream's are released when it ends.
func TestLimitNameBytesTotal(t *testing.T) {
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxNameBytesTotal: 100 << 10}})
	h.publish([]translate.Resources{svc("a", 1001)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := func(conn *grpc.ClientConn, prefix string) (context.CancelFunc, error) {
		sctx, scancel := context.WithCancel(ctx)
		_, err := rawDelta(sctx, conn, &discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: madeUpNames(40, 1000, prefix)})
		return scancel, err
	}
	c1, c2, c3 := h.dial(), h.dial(), h.dial()
	end1, err := sub(c1, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub(c2, "b"); err != nil {
		t.Fatal(err)
	}
	_, err = sub(c3, "c")
	wantLimit(t, err, codes.ResourceExhausted, "max_name_bytes_total")
	if n := h.refusals("max_name_bytes_total"); n != 1 {
		t.Fatalf("%d refusals counted", n)
	}
	end1()
	waitFor(t, "the first stream's names released", func() bool { return len(h.srv.ClientStatuses()) == 1 })
	if _, err := sub(c3, "d"); err != nil {
		t.Fatalf("after a stream ended: %v", err)
	}
}

// A delta client reconnecting with its state (initial_resource_versions)
// is served wherever a fresh one is: a wildcard CDS of 16,000 clusters and
// EDS for each, with Envoy's 61 KB node, under the default limits.
func TestLimitReconnectInitialVersions(t *testing.T) {
	h := newLimitHarness(t, xds.Options{})
	const n = 16000
	names := make([]string, n)
	iv := map[string]string{}
	for i := range names {
		names[i] = fmt.Sprintf("outbound|8080||svc-%05d.default.svc.cluster.local", i)
		iv[names[i]] = "0123456789abcdef01234567"
	}
	node := &core.Node{Id: "envoy", Cluster: strings.Repeat("c", 61000)}
	for _, reconnect := range []bool{false, true} {
		d := h.delta(fmt.Sprint(reconnect))
		var civ map[string]string
		if reconnect {
			civ = iv
		}
		d.send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: civ})
		d.send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: eds, ResourceNamesSubscribe: names, InitialResourceVersions: civ})
		// Both requests read: "*", 16,000 names and a name per type.
		waitFor(t, "the requests read", func() bool {
			select {
			case <-d.ended:
				t.Fatalf("reconnect %v: ended: %v", reconnect, d.err)
			default:
			}
			for _, c := range h.srv.ClientStatuses() {
				if c.SubscribedNames == n+3 {
					return true
				}
			}
			return false
		})
		d.cancel()
		waitFor(t, "the stream closed", func() bool { return len(h.srv.ClientStatuses()) == 0 })
	}
	for _, l := range []string{"max_names_per_stream", "max_name_bytes_per_stream", "max_names_per_connection", "max_name_bytes_per_connection"} {
		if r := h.refusals(l); r != 0 {
			t.Errorf("%s: %d refusals", l, r)
		}
	}
}

// Names a reconnecting client subscribes to explicitly still count; its
// initial_resource_versions alone do not.
func TestLimitReconnectNamesCounted(t *testing.T) {
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxNamesPerStream: 1000}})
	h.publish([]translate.Resources{svc("a", 1001)})
	names := madeUpNames(2000, 40, "r")
	iv := map[string]string{}
	for _, name := range names {
		iv[name] = "v1"
	}
	d := h.delta("wildcard")
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: iv})
	d.recv()
	d2 := h.delta("named")
	d2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: names, InitialResourceVersions: iv})
	<-d2.ended
	wantLimit(t, d2.err, codes.ResourceExhausted, "max_names_per_stream")
	select {
	case <-d.ended:
		t.Fatalf("wildcard reconnect ended: %v", d.err)
	default:
	}
}

// ivStreams opens n delta streams on conn, each sending, for every served
// type, a first request with iv as its initial_resource_versions, then
// (next) a second request without any. It returns each stream's end.
func ivStreams(t *testing.T, ctx context.Context, conn *grpc.ClientConn, n int, iv map[string]string, next bool) []chan error {
	t.Helper()
	var ends []chan error
	for range n {
		st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		end := make(chan error, 1)
		go func() {
			for {
				if _, err := st.Recv(); err != nil {
					end <- err
					return
				}
			}
		}()
		for _, typ := range []string{xds.ClusterType, xds.EndpointType, xds.ListenerType, xds.RouteType} {
			st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesSubscribe: []string{"nope"}, InitialResourceVersions: iv})
			if next {
				st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesSubscribe: []string{"nope2"}})
			}
		}
		ends = append(ends, end)
	}
	return ends
}

// Made-up initial_resource_versions (second review): one connection sending
// ~3 MiB of them per type on stream after stream is stopped by its own
// budget, max_initial_version_bytes_per_connection, and so cannot lock
// other clients out through max_name_bytes_total.
func TestLimitInitialVersionsPerConnection(t *testing.T) {
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxNameBytesTotal: 24 << 20}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	iv := map[string]string{}
	for _, n := range madeUpNames(3000, 1000, "iv") {
		iv[n] = "v"
	}
	ends := ivStreams(t, ctx, h.dial(), 2, iv, false)
	// The streams' requests are read concurrently: the request that
	// crosses the budget may be either stream's.
	select {
	case err := <-ends[0]:
		wantLimit(t, err, codes.ResourceExhausted, "max_initial_version_bytes_per_connection")
	case err := <-ends[1]:
		wantLimit(t, err, codes.ResourceExhausted, "max_initial_version_bytes_per_connection")
	case <-time.After(30 * time.Second):
		t.Fatal("a connection holding 8 × 3 MiB of initial_resource_versions was not stopped")
	}
	// The other stream may cross it too before the refused one's bytes
	// are given back.
	if n := h.refusals("max_initial_version_bytes_per_connection"); n < 1 || n > 2 {
		t.Fatalf("max_initial_version_bytes_per_connection refusals %d, want 1 or 2", n)
	}
	if _, err := rawDelta(ctx, h.dial(), &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNamesSubscribe: madeUpNames(1000, 1000, "o")}); err != nil {
		t.Fatalf("another client: %v", err)
	}
}

// The first request's initial_resource_versions stay counted after the
// type's next request (the cache may keep what it answered them with
// until an ACK): the memory estimate covers them.
func TestLimitInitialVersionsStayCounted(t *testing.T) {
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxInitialVersionBytesPerConnection: 64 << 20}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	iv := map[string]string{}
	size := 0
	for _, n := range madeUpNames(3000, 1000, "iv") {
		iv[n] = "v"
		size += len(n) + 1
	}
	ivStreams(t, ctx, h.dial(), 4, iv, true)
	waitFor(t, "four streams estimated to hold their versions", func() bool {
		var est int64
		cs := h.srv.ClientStatuses()
		for _, c := range cs {
			est += c.EstimatedBytes
		}
		return len(cs) == 4 && est >= int64(4*4*size)
	})
}
