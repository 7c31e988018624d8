package file

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 5 * time.Second

func doc(addrs ...string) []byte {
	var b strings.Builder
	b.WriteString("services:\n  web:\n    endpoints:\n")
	for _, a := range addrs {
		fmt.Fprintf(&b, "      - {address: %s, port: 8080}\n", a)
	}
	return []byte(b.String())
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeAtomic replaces path the way editors and config tools do: a temp
// file in the same directory renamed over it.
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		t.Fatal(err)
	}
}

func newSource(t *testing.T, path string) *Source {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"path": path, "settle": "10ms"})
	src, err := New("static", raw, sources.Env{})
	if err != nil {
		t.Fatal(err)
	}
	return src.(*Source)
}

// run starts the source and returns its sink; the source is stopped (and
// checked to return nil promptly) when the test ends.
func run(t *testing.T, src *Source) *sourcestest.Sink {
	t.Helper()
	return sourcestest.Run(t, src, 2*time.Second)
}

// addrs is the addresses of service web in an update.
func addrs(u sources.Update) []string {
	s, ok := sourcestest.Service(u, "web")
	if !ok {
		return nil
	}
	out := make([]string, len(s.Endpoints))
	for i, e := range s.Endpoints {
		out[i] = e.Address
	}
	return out
}

// lastIs waits until the last update publishes exactly these addresses of
// web, and returns the number of updates then.
func lastIs(t *testing.T, sink *sourcestest.Sink, want ...string) int {
	t.Helper()
	n := 0
	sink.WaitFor(t, wait, fmt.Sprintf("web at %v", want), func(us []sources.Update, _ []error) bool {
		if len(us) == 0 {
			return false
		}
		n = len(us)
		return fmt.Sprint(addrs(us[len(us)-1])) == fmt.Sprint(want)
	})
	return n
}

func errorsAtLeast(t *testing.T, sink *sourcestest.Sink, n int) error {
	t.Helper()
	sink.WaitFor(t, wait, fmt.Sprintf("%d errors", n), func(_ []sources.Update, errs []error) bool { return len(errs) >= n })
	errs := sink.Errors()
	return errs[len(errs)-1]
}

func TestInitialPublish(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, doc("10.0.0.2", "10.0.0.1"))
	src := newSource(t, path)

	names, err := src.ClaimedNames()
	if err != nil || fmt.Sprint(names) != "[web]" {
		t.Fatalf("ClaimedNames = %v, %v", names, err)
	}
	sink := run(t, src)
	lastIs(t, sink, "10.0.0.1", "10.0.0.2")
	u, _ := sink.Last()
	if u.Source != "static" {
		t.Errorf("update source %q", u.Source)
	}
	info := src.DebugInfo().(map[string]any)
	if info["path"] != path || info["services"] != 1 || info["last_error"] != "" {
		t.Errorf("DebugInfo = %v", info)
	}
	if _, err := json.Marshal(info); err != nil {
		t.Errorf("DebugInfo does not encode as JSON: %v", err)
	}
}

func TestEditInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, doc("10.0.0.1"))
	sink := run(t, newSource(t, path))
	lastIs(t, sink, "10.0.0.1")
	write(t, path, doc("10.0.0.1", "10.0.0.2"))
	lastIs(t, sink, "10.0.0.1", "10.0.0.2")
	if len(sink.Errors()) != 0 {
		t.Errorf("errors: %v", sink.Errors())
	}
}

func TestAtomicRenameReplace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, doc("10.0.0.1"))
	sink := run(t, newSource(t, path))
	lastIs(t, sink, "10.0.0.1")
	writeAtomic(t, path, doc("10.0.0.3"))
	lastIs(t, sink, "10.0.0.3")
	writeAtomic(t, path, doc("10.0.0.4"))
	lastIs(t, sink, "10.0.0.4")
}

// TestKubernetesSymlinkSwap mimics a ConfigMap volume: the file is a
// symlink through ..data, a symlink to a timestamped directory that the
// kubelet replaces atomically.
func TestKubernetesSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustDo(os.Mkdir(filepath.Join(dir, "..2026_01"), 0o755))
	write(t, filepath.Join(dir, "..2026_01", "services.yaml"), doc("10.0.0.1"))
	mustDo(os.Symlink("..2026_01", filepath.Join(dir, "..data")))
	mustDo(os.Symlink(filepath.Join("..data", "services.yaml"), filepath.Join(dir, "services.yaml")))

	sink := run(t, newSource(t, filepath.Join(dir, "services.yaml")))
	lastIs(t, sink, "10.0.0.1")

	swap := func(ts string, data []byte) {
		t.Helper()
		mustDo(os.Mkdir(filepath.Join(dir, ts), 0o755))
		write(t, filepath.Join(dir, ts, "services.yaml"), data)
		mustDo(os.Symlink(ts, filepath.Join(dir, "..data_tmp")))
		mustDo(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	}
	swap("..2026_02", doc("10.0.0.2"))
	lastIs(t, sink, "10.0.0.2")
	// The kubelet removes the old directory afterwards; nothing changes.
	mustDo(os.RemoveAll(filepath.Join(dir, "..2026_01")))
	swap("..2026_03", doc("10.0.0.3"))
	lastIs(t, sink, "10.0.0.3")
	if len(sink.Errors()) != 0 {
		t.Errorf("errors: %v", sink.Errors())
	}
}

func TestBrokenFileKeepsLastValid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	valid := doc("10.0.0.1")
	write(t, path, valid)
	src := newSource(t, path)
	sink := run(t, src)
	n := lastIs(t, sink, "10.0.0.1")

	writeAtomic(t, path, []byte("services:\n  web:\n    endpoints: [\n"))
	err := errorsAtLeast(t, sink, 1)
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line") {
		t.Errorf("error %q names neither the file nor the line", err)
	}
	if got := len(sink.Updates()); got != n {
		t.Fatalf("%d updates after a broken file, want %d", got, n)
	}
	if info := src.DebugInfo().(map[string]any); info["last_error"] == "" {
		t.Errorf("DebugInfo does not show the error: %v", info)
	}

	// An invalid value, reported with its field.
	writeAtomic(t, path, doc("web.internal"))
	err = errorsAtLeast(t, sink, 2)
	if !strings.Contains(err.Error(), "services.web.endpoints[0].address") {
		t.Errorf("error %q does not name the field", err)
	}
	time.Sleep(200 * time.Millisecond)
	if got := len(sink.Updates()); got != n {
		t.Fatalf("%d updates after broken files, want %d", got, n)
	}

	// Reverting to the last valid content publishes it again: that is what
	// clears the failure.
	writeAtomic(t, path, valid)
	sink.WaitFor(t, wait, "republish of the reverted file", func(us []sources.Update, _ []error) bool { return len(us) == n+1 })
	if info := src.DebugInfo().(map[string]any); info["last_error"] != "" {
		t.Errorf("DebugInfo still shows an error: %v", info)
	}

	// And a later valid file publishes as usual.
	writeAtomic(t, path, doc("10.0.0.9"))
	lastIs(t, sink, "10.0.0.9")
}

func TestDeletedThenRecreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, doc("10.0.0.1"))
	sink := run(t, newSource(t, path))
	n := lastIs(t, sink, "10.0.0.1")

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	err := errorsAtLeast(t, sink, 1)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v, want not-exist", err)
	}
	if got := len(sink.Updates()); got != n {
		t.Fatalf("deleting the file published (%d updates, want %d): the last content must stay", got, n)
	}

	write(t, path, doc("10.0.0.5"))
	lastIs(t, sink, "10.0.0.5")
}

func TestMissingAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	src := newSource(t, path)
	// A missing file is allowed at start (the README): it claims nothing,
	// and the source waits for it.
	if names, err := src.ClaimedNames(); err != nil || len(names) != 0 {
		t.Errorf("ClaimedNames without the file: %v, %v; want none, no error", names, err)
	}
	sink := run(t, src)
	errorsAtLeast(t, sink, 1)
	if len(sink.Updates()) != 0 {
		t.Fatalf("published without a file: %v", sink.Updates())
	}
	writeAtomic(t, path, doc("10.0.0.1"))
	lastIs(t, sink, "10.0.0.1")
}

func TestUnchangedRewriteNotPublished(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "services.yaml")
	data := doc("10.0.0.1")
	write(t, path, data)
	sink := run(t, newSource(t, path))
	n := lastIs(t, sink, "10.0.0.1")

	write(t, path, data)
	writeAtomic(t, path, data)
	write(t, filepath.Join(dir, "other.txt"), []byte("unrelated"))
	time.Sleep(200 * time.Millisecond)
	if got := len(sink.Updates()); got != n {
		t.Fatalf("%d updates after rewriting the same bytes, want %d", got, n)
	}
	// A real change after that is the next update.
	write(t, path, doc("10.0.0.2"))
	if got := lastIs(t, sink, "10.0.0.2"); got != n+1 {
		t.Errorf("%d updates, want %d", got, n+1)
	}
}

func TestBurstOfWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, doc("10.0.0.1"))
	sink := run(t, newSource(t, path))
	lastIs(t, sink, "10.0.0.1")
	for i := 2; i <= 20; i++ {
		write(t, path, doc(fmt.Sprintf("10.0.1.%d", i)))
	}
	lastIs(t, sink, "10.0.1.20")
}

// blockingSink accepts nothing: Publish waits for ctx like the bridge's
// loop does when it is busy.
type blockingSink struct{ entered chan struct{} }

func (b blockingSink) Publish(ctx context.Context, _ sources.Update) error {
	close(b.entered)
	<-ctx.Done()
	return ctx.Err()
}
func (b blockingSink) PublishPolicy(ctx context.Context, _ sources.PolicyUpdate) error {
	close(b.entered)
	<-ctx.Done()
	return ctx.Err()
}
func (blockingSink) Fail(context.Context, string, error) {}

func TestCancel(t *testing.T) {
	defer goleak.VerifyNone(t)
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, doc("10.0.0.1"))

	for _, blocked := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		var sink sources.Sink = sourcestest.NewSink()
		entered := make(chan struct{})
		if blocked {
			sink = blockingSink{entered}
		}
		done := make(chan error, 1)
		go func() { done <- newSource(t, path).Run(ctx, sink) }()
		if blocked {
			<-entered
		} else {
			sink.(*sourcestest.Sink).WaitFor(t, wait, "first publish", func(us []sources.Update, _ []error) bool { return len(us) == 1 })
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("blocked=%v: Run returned %v, want nil", blocked, err)
			}
		case <-time.After(time.Second):
			t.Fatalf("blocked=%v: Run did not return within 1s of cancel", blocked)
		}
	}
}

func TestRunWithoutDirectory(t *testing.T) {
	src := newSource(t, filepath.Join(t.TempDir(), "nope", "services.yaml"))
	err := src.Run(context.Background(), sourcestest.NewSink())
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Run = %v, want an error naming the directory", err)
	}
}

func TestNew(t *testing.T) {
	env := sources.Env{BaseDir: "/etc/xdsbridge"}
	for _, tc := range []struct {
		raw, wantPath string
		wantSettle    time.Duration
		wantErr       string
	}{
		{raw: `{"path": "services.yaml"}`, wantPath: "/etc/xdsbridge/services.yaml", wantSettle: 20 * time.Millisecond},
		{raw: `{"path": "/srv/s.yaml", "settle": "1s"}`, wantPath: "/srv/s.yaml", wantSettle: time.Second},
		{raw: `{"path": "sub/s.json", "settle": 0.5}`, wantPath: "/etc/xdsbridge/sub/s.json", wantSettle: 500 * time.Millisecond},
		{raw: `{}`, wantErr: "path: missing"},
		{raw: ``, wantErr: "path: missing"},
		{raw: `{"pth": "x"}`, wantErr: `unknown field "pth"`},
		{raw: `{"path": 1}`, wantErr: "path: expected a string, got 1"},
		{raw: `{"path": "x", "settle": "soon"}`, wantErr: `settle: invalid duration "soon"`},
		{raw: `{"path": "x", "settle": "-1s"}`, wantErr: "settle: negative duration"},
		{raw: `{"path": "x", "settle": "1s", "max_settle": "500ms"}`, wantErr: "max_settle: 500ms is less than settle"},
		{raw: `{"path": "x", "max_bytes": -1}`, wantErr: "max_bytes: -1 is negative"},
		{raw: `{"path": "x", "settle": "1h"}`, wantErr: "settle: 1h is not in 0s..10s"},
		{raw: `{"path": "x", "settle": 1e10}`, wantErr: "settle: duration 1e+10 seconds is out of range"},
	} {
		src, err := New("n", json.RawMessage(tc.raw), env)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("New(%s) = %v, want error %q", tc.raw, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("New(%s): %v", tc.raw, err)
			continue
		}
		s := src.(*Source)
		if s.maxSettle != 10*s.settle {
			t.Errorf("New(%s): max_settle %v, want 10 × settle", tc.raw, s.maxSettle)
		}
		if s.max != DefaultMaxBytes {
			t.Errorf("New(%s): max_bytes %d, want the default", tc.raw, s.max)
		}
		if s.Name() != "n" || s.Path() != tc.wantPath || s.settle != tc.wantSettle {
			t.Errorf("New(%s) = name %q path %q settle %v", tc.raw, s.Name(), s.Path(), s.settle)
		}
	}
	// Without a BaseDir a relative path stays relative to the working
	// directory.
	src, err := New("n", json.RawMessage(`{"path": "s.yaml"}`), sources.Env{})
	if err != nil || src.(*Source).Path() != "s.yaml" {
		t.Errorf("New without BaseDir: %v", err)
	}
}

func TestServices(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.json")
	write(t, path, []byte(`{"services": {"web": {"endpoints": [{"address": "10.0.0.1", "port": 80}]}}}`))
	svcs, err := newSource(t, path).load(context.Background())
	if err != nil || len(svcs) != 1 || svcs[0].Name != "web" {
		t.Fatalf("Services = %v, %v", svcs, err)
	}
	write(t, path, []byte(`{"services": {"web": {"endpoints": [{"address": "10.0.0.1", "port": 0}]}}}`))
	if _, err := newSource(t, path).load(context.Background()); err == nil || !strings.Contains(err.Error(), path+": line 1, column 61: services.web.endpoints[0].port") {
		t.Errorf("error %v, want the file and field", err)
	}
}

// An editor that truncates then writes leaves an empty file for a moment:
// that is an error, and the services stay; `services: {}` empties the set.
func TestEmptyFileKeepsLastValid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, doc("10.0.0.1"))
	src := newSource(t, path)
	sink := run(t, src)
	n := lastIs(t, sink, "10.0.0.1")
	for i, empty := range []string{"", "  \n", "# being edited\n", "null\n"} {
		write(t, path, []byte(empty))
		if err := errorsAtLeast(t, sink, i+1); !errors.Is(err, ErrEmpty) || !strings.Contains(err.Error(), path) {
			t.Errorf("%q: error %v, want ErrEmpty naming the file", empty, err)
		}
	}
	if us := sink.Updates(); len(us) != n {
		t.Fatalf("an empty file published: %+v", us[len(us)-1])
	}
	write(t, path, []byte("services: {}\n"))
	sink.WaitFor(t, wait, "an empty set", func(us []sources.Update, _ []error) bool {
		return len(us) > n && len(us[len(us)-1].Services) == 0
	})
}

// Only regular files are read: a FIFO would block the open (and the read
// forever), /dev/zero would fill memory. Each is refused with an error
// naming the path, from ClaimedNames and from Run, without hanging.
func TestOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir.yaml")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock.yaml")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for path, kind := range map[string]string{fifo: "named pipe", zero: "character device", sub: "directory", sock: "socket"} {
		src := newSource(t, path)
		done := make(chan error, 1)
		go func() { _, err := src.ClaimedNames(); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), kind) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("%s: ClaimedNames error %v, want one naming the path and %q", kind, err, kind)
			}
		case <-time.After(wait):
			t.Fatalf("%s: ClaimedNames hangs", kind)
		}
		sink := run(t, src)
		if err := errorsAtLeast(t, sink, 1); !strings.Contains(err.Error(), kind) {
			t.Errorf("%s: Run reported %v", kind, err)
		}
		if info := src.DebugInfo().(map[string]any); !strings.Contains(info["last_error"].(string), path) {
			t.Errorf("%s: debug last_error %q", kind, info["last_error"])
		}
	}
}

func TestMaxBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	data := doc("10.0.0.1")
	write(t, path, data)
	raw, _ := json.Marshal(map[string]any{"path": path, "settle": "10ms", "max_bytes": len(data)})
	s, err := New("static", raw, sources.Env{})
	if err != nil {
		t.Fatal(err)
	}
	src := s.(*Source)
	sink := run(t, src)
	n := lastIs(t, sink, "10.0.0.1") // exactly max_bytes is read
	write(t, path, doc("10.0.0.12")) // one byte more
	if err := errorsAtLeast(t, sink, 1); !strings.Contains(err.Error(), "larger than max_bytes") || !strings.Contains(err.Error(), path) {
		t.Errorf("error %v", err)
	}
	if len(sink.Updates()) != n {
		t.Error("a file over max_bytes was published")
	}
	// A file that grows after its size was looked at is still read only to
	// the cap plus one byte.
	ctx := context.Background()
	if _, err := readFile(ctx, "/dev/zero", 10); err == nil {
		t.Error("readFile(/dev/zero) succeeded")
	}
	big := filepath.Join(t.TempDir(), "big")
	write(t, big, make([]byte, 3*readChunk+5))
	if _, err := readFile(ctx, big, 3*readChunk+4); err == nil || !strings.Contains(err.Error(), "larger than max_bytes") {
		t.Errorf("readFile over the cap: %v", err)
	}
	if got, err := readFile(ctx, big, 3*readChunk+5); err != nil || len(got) != 3*readChunk+5 {
		t.Errorf("readFile at the cap: %d bytes, %v", len(got), err)
	}
}

func TestReadAndParseObserveContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, doc("10.0.0.1"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := readFile(ctx, path, DefaultMaxBytes); !errors.Is(err, context.Canceled) {
		t.Errorf("readFile after cancel: %v", err)
	}
	if _, err := ParseContext(ctx, doc("10.0.0.1")); !errors.Is(err, context.Canceled) {
		t.Errorf("ParseContext after cancel: %v", err)
	}
}

// Deleting and recreating the watched directory: the watch comes back and
// the recreated file is published; /debug/sources shows the gap.
func TestDirectoryDeletedAndRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "services.yaml")
	write(t, path, doc("10.0.0.1"))
	src := newSource(t, path)
	sink := run(t, src)
	lastIs(t, sink, "10.0.0.1")
	for i, addr := range []string{"10.0.0.2", "10.0.0.3"} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		errorsAtLeast(t, sink, i+1)
		sink.WaitFor(t, wait, "watch lost in debug info", func([]sources.Update, []error) bool {
			info := src.DebugInfo().(map[string]any)
			return info["watch"] == "lost" && info["watch_gaps"] == i+1
		})
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, path, doc(addr))
		lastIs(t, sink, addr)
		write(t, path, doc(addr, "10.0.1.1")) // and later edits are seen
		lastIs(t, sink, addr, "10.0.1.1")
		if info := src.DebugInfo().(map[string]any); info["watch"] != "ok" || info["watch_gaps"] != i+1 || info["watch_error"] != "" {
			t.Errorf("DebugInfo after the return = %v", info)
		}
	}
}

// writeEvery writes to path every 10ms until the test ends.
func writeEvery(t *testing.T, path string, content func(i int) []byte) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			_ = os.WriteFile(path, content(i), 0o644)
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

func newSettleSource(t *testing.T, path, settle string) *Source {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"path": path, "settle": settle})
	src, err := New("static", raw, sources.Env{})
	if err != nil {
		t.Fatal(err)
	}
	return src.(*Source)
}

// Writes to other files in the directory (a log, an editor's swap file)
// every 10ms, more often than settle, do not hold the reload back.
func TestUnrelatedWritesDoNotDelay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "services.yaml")
	write(t, path, doc("10.0.0.1"))
	sink := run(t, newSettleSource(t, path, "50ms"))
	lastIs(t, sink, "10.0.0.1")
	var log []byte
	writeEvery(t, filepath.Join(dir, "other.log"), func(i int) []byte { log = fmt.Appendf(log, "%d\n", i); return log })
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	write(t, path, doc("10.0.0.2"))
	lastIs(t, sink, "10.0.0.2")
	t.Logf("published %v after the change, unrelated writes every 10ms, settle 50ms", time.Since(start))
}

// The services file itself rewritten every 10ms, more often than settle:
// a reload still happens at most max_settle (10 × settle) after the first.
func TestSettleIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, doc("10.0.0.1"))
	sink := run(t, newSettleSource(t, path, "50ms"))
	n := lastIs(t, sink, "10.0.0.1")
	writeEvery(t, path, func(i int) []byte { return doc(fmt.Sprintf("10.0.2.%d", i%250+1)) })
	start := time.Now()
	sink.WaitFor(t, wait, "a publish while the file keeps changing", func(us []sources.Update, _ []error) bool { return len(us) > n })
	t.Logf("published %v after changes began every 10ms, settle 50ms, max_settle 500ms", time.Since(start))
}

func TestChain(t *testing.T) {
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_01_02")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ts, "services.yaml"), doc("10.0.0.1"))
	if err := os.Symlink("..2026_01_02", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "services.yaml")
	if err := os.Symlink("..data/services.yaml", path); err != nil {
		t.Fatal(err)
	}
	got := newSource(t, path).chain()
	if fmt.Sprint(got) != "map[..2026_01_02:true ..data:true services.yaml:true]" {
		t.Errorf("chain = %v", got)
	}
}

// TestLoadCost prints (does not assert) the time and memory to read and
// parse a realistic 5,000-service file (3 endpoints each); with
// XDSBRIDGE_FILE_BIG=1 also a file near the default cap.
func TestLoadCost(t *testing.T) {
	gen := func(limit int64) []byte {
		var b strings.Builder
		b.WriteString("services:\n")
		for i := 0; ; i++ {
			if limit == 0 && i == 5000 || limit > 0 && int64(b.Len()) > limit-300 {
				break
			}
			fmt.Fprintf(&b, "  svc-%d:\n    endpoints:\n", i)
			for j := 1; j <= 3; j++ {
				fmt.Fprintf(&b, "      - {address: 10.%d.%d.%d, port: %d, locality: {zone: z%d}}\n", i/65536%256, i/256%256, i%256, 8080+j, j)
			}
		}
		return []byte(b.String())
	}
	cases := map[string]int64{"5000 services": 0}
	if os.Getenv("XDSBRIDGE_FILE_BIG") != "" {
		cases["near max_bytes"] = DefaultMaxBytes
	}
	for name, limit := range cases {
		path := filepath.Join(t.TempDir(), "services.yaml")
		write(t, path, gen(limit))
		src := newSource(t, path)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		svcs, err := src.load(context.Background())
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(path)
		t.Logf("%s: %d bytes, %d services: loaded in %v, %d MiB allocated, heap reserved %d MiB",
			name, fi.Size(), len(svcs), d.Round(time.Millisecond),
			(after.TotalAlloc-before.TotalAlloc)>>20, after.HeapSys>>20)
	}
}

// TestReadThatDoesNotReturnMarksStale: a filesystem that stops answering
// (reads and stats block) marks the source stale within stale_after, with
// nothing published and no second read started while one is stuck; when
// it answers again the source confirms its state.
func TestReadThatDoesNotReturnMarksStale(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, doc("10.0.0.1"))
	raw, _ := json.Marshal(map[string]any{"path": path, "settle": "10ms", "stale_after": "1s"})
	src, err := New("static", raw, sources.Env{})
	if err != nil {
		t.Fatal(err)
	}
	s := src.(*Source)
	var hung, calls atomic.Int32
	release := make(chan struct{})
	block := func() {
		if hung.Load() == 1 {
			calls.Add(1)
			<-release
		}
	}
	s.readFn = func(ctx context.Context, p string, max int64) ([]byte, error) {
		block()
		return readFile(ctx, p, max)
	}
	s.statFn = func(p string) error {
		block()
		return statFile(p)
	}
	sink := run(t, s)
	lastIs(t, sink, "10.0.0.1")
	sink.WaitConfirms(t, wait, 1)

	hung.Store(1)
	start := time.Now()
	err = errorsAtLeast(t, sink, 1)
	// The first stat starts within stale_after/2 and is given stale_after.
	if took := time.Since(start); took > 1500*time.Millisecond+500*time.Millisecond {
		t.Errorf("stale after %s, want within 1.5s (stale_after 1s, stat every 0.5s)", took)
	}
	want := path + ": a read did not return within 1s (stale_after): the filesystem does not answer"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	confirms := len(sink.Confirms())
	time.Sleep(1500 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Errorf("%d reads or stats started while one was stuck, want 1", n)
	}
	if n := len(sink.Errors()); n != 1 {
		t.Errorf("%d failures reported while stuck, want 1", n)
	}
	if n := len(sink.Updates()); n != 1 {
		t.Errorf("%d updates, want the first only", n)
	}

	hung.Store(0)
	close(release)
	// The stuck read returns: the file is read again and published (which
	// clears the stale mark), then confirmed by stats.
	sink.WaitFor(t, wait, "a publish after the filesystem answers", func(us []sources.Update, _ []error) bool { return len(us) == 2 })
	sink.WaitConfirms(t, wait, confirms+1)
	if u, _ := sink.Last(); fmt.Sprint(addrs(u)) != "[10.0.0.1]" {
		t.Errorf("after recovery: %v", addrs(u))
	}
}
