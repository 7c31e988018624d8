package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// testCache serves n services of eps endpoints each.
func testCache(t testing.TB, n, eps int) *xds.Cache {
	c := xds.NewCache()
	all := make([]translate.Resources, 0, n)
	for i := range n {
		s := sources.Service{Name: fmt.Sprintf("svc-%05d", i)}
		for j := range eps {
			s.Endpoints = append(s.Endpoints, sources.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", i>>8&255, i&255, j+1), Port: 8080,
				Metadata: sources.Metadata{"m": {"k": strings.Repeat("v", 64)}}})
		}
		r, err := translate.Service(s)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	if err := c.PublishServices(all, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func getResources(t *testing.T, h http.Handler, query string) (*httptest.ResponseRecorder, map[string][]ResourceDump) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/resources"+query, nil))
	if rec.Code != http.StatusOK {
		return rec, nil
	}
	var out map[string][]ResourceDump
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s: %v\n%s", query, err, rec.Body.String())
	}
	return rec, out
}

func TestDebugResourcesStreamed(t *testing.T) {
	c := testCache(t, 20, 2)
	h := (&App{Cache: c}).AdminHandler()

	_, got := getResources(t, h, "")
	if want := Resources(c, "", ""); !reflect.DeepEqual(normalize(t, got), normalize(t, want)) {
		t.Fatalf("streamed dump differs from Resources()")
	}
	if len(got["cds"]) != 20 || len(got["eds"]) != 20 || got["lds"] == nil || got["rds"] == nil {
		t.Fatalf("counts: cds %d eds %d lds %v rds %v", len(got["cds"]), len(got["eds"]), got["lds"], got["rds"])
	}

	rec, got := getResources(t, h, "?type=eds&limit=3")
	if len(got) != 1 || len(got["eds"]) != 3 || got["eds"][0].Name != "svc-00000" || got["eds"][2].Name != "svc-00002" {
		t.Fatalf("type=eds&limit=3: %+v", got)
	}
	if rec.Header().Get("X-Xdsbridge-Truncated") != "true" {
		t.Fatalf("limit cut the list but no X-Xdsbridge-Truncated header")
	}
	rec, got = getResources(t, h, "?limit=100")
	if len(got["eds"]) != 20 || rec.Header().Get("X-Xdsbridge-Truncated") != "" {
		t.Fatalf("limit=100: %d eds, truncated header %q", len(got["eds"]), rec.Header().Get("X-Xdsbridge-Truncated"))
	}
	_, got = getResources(t, h, "?name=svc-00007")
	if len(got["cds"]) != 1 || len(got["eds"]) != 1 || got["eds"][0].Name != "svc-00007" || len(got["eds"][0].Resource) == 0 {
		t.Fatalf("name=svc-00007: %+v", got)
	}
	_, got = getResources(t, h, "?name=absent&limit=0")
	if len(got) != 4 || len(got["cds"]) != 0 {
		t.Fatalf("name=absent: %+v", got)
	}
	for _, bad := range []string{"?limit=-1", "?limit=x"} {
		if rec, _ := getResources(t, h, bad); rec.Code != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400", bad, rec.Code)
		}
	}
}

// An unknown type= is refused with the accepted values, not answered with
// an empty dump; each accepted value, in any case, selects its type.
func TestDebugResourcesType(t *testing.T) {
	c := testCache(t, 3, 1)
	h := (&App{Cache: c}).AdminHandler()
	for _, bad := range []string{"bogus", "cluster", "eds,cds", " eds"} {
		rec, _ := getResources(t, h, "?type="+url.QueryEscape(bad))
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("type=%q: status %d, want 400; body %s", bad, rec.Code, rec.Body)
		}
		body := rec.Body.String()
		if !strings.Contains(body, fmt.Sprintf("unknown type %q", bad)) {
			t.Fatalf("type=%q: body %q does not name the value", bad, body)
		}
		for alias := range typeAliases {
			if !strings.Contains(body, alias) {
				t.Fatalf("type=%q: body %q does not list %q", bad, body, alias)
			}
		}
	}
	for alias, typeURL := range typeAliases {
		var short string
		for _, rt := range resourceTypes {
			if rt.url == typeURL {
				short = rt.short
			}
		}
		for _, v := range []string{alias, strings.ToUpper(alias)} {
			rec, got := getResources(t, h, "?type="+v)
			if rec.Code != http.StatusOK || len(got) != 1 || got[short] == nil {
				t.Fatalf("type=%s: status %d, types %v, want only %s", v, rec.Code, slices.Collect(maps.Keys(got)), short)
			}
		}
	}
}

// normalize re-encodes a dump so that both sides compare by JSON value.
func normalize(t *testing.T, m map[string][]ResourceDump) any {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// serve runs the admin server on a loopback listener until the returned
// stop is called; stop returns ServeAdmin's error and how long it took.
func serve(t *testing.T, c config.Admin, h http.Handler) (addr string, stop func() (error, time.Duration)) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeAdmin(ctx, NewAdminServer(c, h), lis, AdminTimeouts(c).Shutdown, nil) }()
	var once sync.Once
	var res error
	var took time.Duration
	stop = func() (error, time.Duration) {
		once.Do(func() {
			start := time.Now()
			cancel()
			select {
			case res = <-done:
			case <-time.After(10 * time.Second):
				res = fmt.Errorf("ServeAdmin did not return")
			}
			took = time.Since(start)
		})
		return res, took
	}
	t.Cleanup(func() { stop() })
	return lis.Addr().String(), stop
}

func rawGet(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	return conn
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Clients asking for a large dump and not reading it hold neither the
// dump in memory nor the handler past the write timeout.
func TestAdminSlowReaders(t *testing.T) {
	c := testCache(t, 3000, 10)
	full := httptest.NewRecorder()
	(&App{Cache: c}).AdminHandler().ServeHTTP(full, httptest.NewRequest("GET", "/debug/resources", nil))
	size := full.Body.Len()
	full = nil

	const clients = 10
	var mu sync.Mutex
	var returned []time.Duration
	var started sync.WaitGroup
	started.Add(clients)
	inner := (&App{Cache: c}).AdminHandler()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		started.Done()
		inner.ServeHTTP(w, r)
		mu.Lock()
		returned = append(returned, time.Since(start))
		mu.Unlock()
	})
	write := 1500 * time.Millisecond
	addr, _ := serve(t, config.Admin{WriteTimeout: decode.Duration(write)}, h)
	before := heapAlloc()
	for range clients {
		rawGet(t, addr, "/debug/resources") // never read
	}
	started.Wait()
	time.Sleep(write / 2)
	during := heapAlloc()
	grew := int64(during) - int64(before)
	t.Logf("dump %d B; heap grew %d B with %d stalled clients", size, grew, clients)
	if grew > int64(size)*clients/4 {
		t.Errorf("heap grew %d B with %d stalled clients of a %d B dump: responses are buffered", grew, clients, size)
	}
	deadline := time.Now().Add(write + 5*time.Second)
	for {
		mu.Lock()
		n := len(returned)
		mu.Unlock()
		if n == clients {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d handlers still writing %s after the write timeout", clients-n, clients, write+5*time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, d := range returned {
		if d > write+3*time.Second {
			t.Errorf("a handler returned after %s (write timeout %s)", d, write)
		}
	}
}

func TestAdminIdleConnectionClosed(t *testing.T) {
	addr, _ := serve(t, config.Admin{IdleTimeout: decode.Duration(200 * time.Millisecond)}, (&App{Cache: xds.NewCache()}).AdminHandler())
	conn := rawGet(t, addr, "/healthz")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection: read %v, want EOF (closed by the server)", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("idle connection closed after %s (idle timeout 200ms)", d)
	}
}

// Shutdown returns promptly, without error, with idle keep-alive clients
// and a client that stopped reading a large response.
func TestAdminShutdownPrompt(t *testing.T) {
	c := testCache(t, 2000, 10)
	grace := 300 * time.Millisecond
	addr, stop := serve(t, config.Admin{ShutdownTimeout: decode.Duration(grace)}, (&App{Cache: c}).AdminHandler())
	for range 5 {
		conn := rawGet(t, addr, "/healthz")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close() // the connection stays open, idle
	}
	rawGet(t, addr, "/debug/resources") // never read: in flight at shutdown
	time.Sleep(200 * time.Millisecond)
	err, took := stop()
	if err != nil {
		t.Fatalf("ServeAdmin: %v", err)
	}
	if took > grace+2*time.Second {
		t.Fatalf("shutdown took %s (grace %s)", took, grace)
	}
	t.Logf("shutdown took %s", took)
}

func TestAdminTimeoutsDefaults(t *testing.T) {
	got := AdminTimeouts(config.Admin{WriteTimeout: decode.Duration(time.Second)})
	want := AdminTimeoutSet{DefaultAdminReadHeaderTimeout, DefaultAdminReadTimeout, time.Second, DefaultAdminIdleTimeout, DefaultAdminShutdownTimeout}
	if got != want {
		t.Fatalf("AdminTimeouts = %+v, want %+v", got, want)
	}
}

// The whole app stops promptly and without error with admin clients
// connected: idle keep-alives and one that stopped reading a response.
func TestRunStopsWithAdminClients(t *testing.T) {
	dir := t.TempDir()
	var svcs strings.Builder
	svcs.WriteString("services:\n")
	for i := range 500 {
		fmt.Fprintf(&svcs, "  svc-%d:\n    endpoints:\n", i)
		for j := range 10 {
			fmt.Fprintf(&svcs, "      - {address: 10.%d.%d.%d, port: 8080, metadata: {m: {k: %s}}}\n", i>>8, i&255, j+1, strings.Repeat("v", 200))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(svcs.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`
xds: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0", shutdown_timeout: 300ms}
logging: {level: error}
sources:
  - name: static
    file: {path: services.yaml}
`), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	a, done, cancel := runApp(t, cfg)
	defer cancel()
	for range 3 {
		conn := rawGet(t, a.AdminAddr(), "/healthz")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	rawGet(t, a.AdminAddr(), "/debug/resources")
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of the cancel")
	}
	t.Logf("stopped in %s", time.Since(start))
}
