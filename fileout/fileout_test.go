package fileout_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/fileout"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// publishClusters makes the cache hold n clusters c000.. and their assignments,
// each cluster's connect_timeout n seconds and c000's assignment n
// endpoints (the others one), so a file shows by itself whether it is whole: every
// resource says how many the response must carry.
func publishClusters(t testing.TB, c *xds.Cache, n int) {
	t.Helper()
	var clusters, loads []store.Resource
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("c%03d", i)
		names = append(names, name)
		cl := translate.Cluster(name)
		cl.ConnectTimeout = durationpb.New(time.Duration(n) * time.Second)
		cla := &endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpoint.LocalityLbEndpoints{{Locality: &core.Locality{Zone: "a"}}}}
		for j := 0; j < n && (i == 0 || j == 0); j++ {
			cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, &endpoint.LbEndpoint{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: "127.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(1000 + j)}}}},
			}}})
		}
		clusters = append(clusters, store.Resource{Name: name, Msg: cl})
		loads = append(loads, store.Resource{Name: name, Msg: cla, DependsOn: &store.Dep{TypeURL: xds.ClusterType, Name: name}})
	}
	var gone []string
	for _, ri := range c.List(xds.ClusterType) {
		if !slices.Contains(names, ri.Name) {
			gone = append(gone, ri.Name)
		}
	}
	if err := c.Apply(
		store.Change{TypeURL: xds.ClusterType, Upserts: clusters},
		store.Change{TypeURL: xds.EndpointType, Upserts: loads},
		store.Change{TypeURL: xds.EndpointType, Deletes: gone},
		store.Change{TypeURL: xds.ClusterType, Deletes: gone},
	); err != nil {
		t.Fatal(err)
	}
}

// decodeFile parses a file of the layout as Envoy would, by its extension.
func decodeFile(path string, b []byte) (*discovery.DiscoveryResponse, error) {
	resp := &discovery.DiscoveryResponse{}
	switch filepath.Ext(path) {
	case ".pb":
		return resp, proto.Unmarshal(b, resp)
	case ".yaml":
		js, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, err
		}
		b = js
	}
	return resp, protojson.Unmarshal(b, resp)
}

// checkWhole checks that a DiscoveryResponse is complete: it has a
// version and type, and as many resources (clusters) or endpoints
// (an assignment) as each of its resources says.
func checkWhole(resp *discovery.DiscoveryResponse) error {
	if resp.VersionInfo == "" || resp.TypeUrl == "" {
		return fmt.Errorf("no version_info or type_url: %v", resp)
	}
	for _, a := range resp.Resources {
		m, err := a.UnmarshalNew()
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *cluster.Cluster:
			if want := int(m.ConnectTimeout.AsDuration() / time.Second); want != len(resp.Resources) {
				return fmt.Errorf("%d clusters, cluster %s says %d", len(resp.Resources), m.Name, want)
			}
		case *endpoint.ClusterLoadAssignment:
			if len(resp.Resources) != 1 {
				return fmt.Errorf("%d assignments in one file", len(resp.Resources))
			}
		}
	}
	return nil
}

func newWriter(t *testing.T, c *xds.Cache, cfg fileout.Config) *fileout.Writer {
	t.Helper()
	w, err := fileout.New(c, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestNoPartialFile: while the cache changes size from 1 to 60
// clusters and back, and the writer runs with a short debounce, readers
// in parallel read clusters and one assignment file in a loop: every read
// parses as a whole DiscoveryResponse, in each format and mode. Breaking
// writeAtomic into an in-place os.WriteFile makes it fail.
func TestNoPartialFile(t *testing.T) {
	for _, mode := range []string{fileout.ModePath, fileout.ModeWatchedDirectory} {
		for _, format := range []string{fileout.FormatYAML, fileout.FormatProto} {
			t.Run(mode+"/"+format, func(t *testing.T) {
				c := xds.NewCache()
				publishClusters(t, c, 1)
				c.MarkReady()
				dir := filepath.Join(t.TempDir(), "out")
				w := newWriter(t, c, fileout.Config{Dir: dir, Format: format, Mode: mode, Debounce: decode.Duration(time.Millisecond)})
				if _, err := w.WriteOnce(); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				runDone := make(chan error, 1)
				go func() { runDone <- w.Run(ctx) }()
				var stop atomic.Bool
				var wg sync.WaitGroup
				t.Cleanup(func() {
					stop.Store(true)
					wg.Wait()
					cancel()
					<-runDone
				})

				ext := fileout.Ext(format)
				paths := []string{filepath.Join(dir, "clusters"+ext), filepath.Join(dir, fileout.EndpointsDir, "c000"+ext)}
				var reads, versions atomic.Int64
				errs := make(chan error, len(paths))
				for _, p := range paths {
					wg.Add(1)
					go func() {
						defer wg.Done()
						last := ""
						for !stop.Load() {
							b, err := os.ReadFile(p)
							if err != nil {
								errs <- fmt.Errorf("read %s: %v", p, err)
								return
							}
							resp, err := decodeFile(p, b)
							if err == nil {
								err = checkWhole(resp)
							}
							if err != nil {
								errs <- fmt.Errorf("%s (%d bytes): %v", p, len(b), err)
								return
							}
							reads.Add(1)
							if resp.VersionInfo != last {
								versions.Add(1)
								last = resp.VersionInfo
							}
							// Pacing only (readers share two cores
							// with the writer), not synchronisation.
							time.Sleep(200 * time.Microsecond)
						}
					}()
				}
				sizes := []int{1}
				for n := 2; n <= 40; n += 6 {
					sizes = append(sizes, n)
				}
				for i := len(sizes) - 1; i >= 0; i-- {
					sizes = append(sizes, sizes[i])
				}
				before := w.Stats()
				for _, n := range sizes {
					publishClusters(t, c, n)
					// Each size is written before the next.
					deadline := time.Now().Add(10 * time.Second)
					for {
						b, err := os.ReadFile(paths[0])
						if err == nil && hasClusters(paths[0], b, n) {
							break
						}
						if time.Now().After(deadline) {
							// The writer's counters and the file as it is
							// tell a lost wake-up from a failing round.
							got, rerr := os.ReadFile(paths[0])
							resp, derr := decodeFile(paths[0], got)
							names, nerr := clusterNames(resp, derr)
							t.Fatalf("clusters file never had %d clusters: writer %+v; the file (read error %v, %d bytes) has version_info %q and clusters %v (error %v)", n, w.Stats(), rerr, len(got), resp.GetVersionInfo(), names, nerr)
						}
						time.Sleep(2 * time.Millisecond)
					}
				}
				stop.Store(true)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				st := w.Stats()
				t.Logf("%d sizes published, %d files written, %d reads, %d versions seen by readers, %d failures", len(sizes), st.Written-before.Written, reads.Load(), versions.Load(), st.Failures)
				if st.Failures != 0 {
					t.Errorf("%d write rounds failed", st.Failures)
				}
				// The readers read across the changes (32 versions at most
				// on two files; a loaded machine may let a reader miss some).
				if versions.Load() < int64(len(sizes)/2) {
					t.Errorf("readers saw %d versions; want at least %d", versions.Load(), len(sizes)/2)
				}
			})
		}
	}
}

// inodeOf identifies the file at p (following symlinks).
func inodeOf(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%v/%d", fi.ModTime(), fi.Sys().(*syscall.Stat_t).Ino)
}

// TestUnchangedNotRewritten: a second write of the same content writes
// nothing (same inode and mtime on disk, same generation); a change to one
// assignment rewrites that file only (mode path); a new writer on the
// same directory (a restart) writes nothing.
func TestUnchangedNotRewritten(t *testing.T) {
	for _, mode := range []string{fileout.ModePath, fileout.ModeWatchedDirectory} {
		t.Run(mode, func(t *testing.T) {
			c := xds.NewCache()
			publishClusters(t, c, 3)
			c.MarkReady()
			dir := t.TempDir()
			cfg := fileout.Config{Dir: dir, Mode: mode}
			w := newWriter(t, c, cfg)
			res, err := w.WriteOnce()
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Written) != 4 {
				t.Fatalf("first write: %v; want clusters and 3 assignments", res.Written)
			}
			clusters := filepath.Join(dir, "clusters.yaml")
			id := inodeOf(t, clusters)
			gen, _ := os.Readlink(filepath.Join(dir, "..data"))
			for i := 0; i < 3; i++ {
				if res, err = w.WriteOnce(); err != nil || len(res.Written)+len(res.Removed) != 0 {
					t.Fatalf("unchanged write %d: wrote %v, removed %v, err %v", i, res.Written, res.Removed, err)
				}
			}
			if got := inodeOf(t, clusters); got != id {
				t.Fatalf("clusters file replaced without a change: %s -> %s", id, got)
			}
			if g, _ := os.Readlink(filepath.Join(dir, "..data")); g != gen {
				t.Fatalf("..data swapped without a change: %q -> %q", gen, g)
			}

			// One endpoint changes: in mode path only its file is written.
			cla := proto.Clone(c.Get(xds.EndpointType, "c001")).(*endpoint.ClusterLoadAssignment)
			cla.Endpoints[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress().PortSpecifier = &core.SocketAddress_PortValue{PortValue: 2000}
			if err := c.Apply(store.Change{TypeURL: xds.EndpointType, Upserts: []store.Resource{{Name: "c001", Msg: cla, DependsOn: &store.Dep{TypeURL: xds.ClusterType, Name: "c001"}}}}); err != nil {
				t.Fatal(err)
			}
			if res, err = w.WriteOnce(); err != nil {
				t.Fatal(err)
			}
			if want := []string{filepath.Join("endpoints", "c001.yaml")}; !slices.Equal(res.Written, want) {
				t.Fatalf("after one assignment changed, wrote %v; want %v", res.Written, want)
			}
			if mode == fileout.ModePath && inodeOf(t, clusters) != id {
				t.Fatal("clusters file rewritten though unchanged")
			}

			// The counters, as exported.
			reg := prometheus.NewRegistry()
			w.Register(reg)
			if n := counterValue(t, reg, "xdsbridge_files_written_total"); n != 5 {
				t.Fatalf("xdsbridge_files_written_total %v; want 5 (4, then 1)", n)
			}

			// A restarted writer finds everything written, and removes a
			// temporary file an interrupted write left.
			stray := filepath.Join(dir, ".clusters.yaml.tmp-123")
			if err := os.WriteFile(stray, []byte("resources: ["), 0o644); err != nil {
				t.Fatal(err)
			}
			w2 := newWriter(t, c, cfg)
			if res, err = w2.WriteOnce(); err != nil || len(res.Written)+len(res.Removed) != 0 {
				t.Fatalf("restarted writer: wrote %v, removed %v, err %v", res.Written, res.Removed, err)
			}
			if _, err := os.Stat(stray); mode == fileout.ModePath && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("stray temporary file left: %v", err)
			}
		})
	}
}

// TestWatchedDirectoryLayout: in mode watched_directory the names are
// symlinks through ..data to the newest generation, at most two
// generations are kept, a removed cluster's assignment is absent from
// the new generation, and clusters name their assignment by a path under
// the watched directory.
func TestWatchedDirectoryLayout(t *testing.T) {
	c := xds.NewCache()
	publishClusters(t, c, 3)
	c.MarkReady()
	dir := t.TempDir()
	w := newWriter(t, c, fileout.Config{Dir: dir, Mode: fileout.ModeWatchedDirectory, Format: fileout.FormatJSON, EnvoyDir: "/etc/envoy/xds"})
	for _, n := range []int{3, 4, 2, 5, 2} {
		publishClusters(t, c, n)
		if _, err := w.WriteOnce(); err != nil {
			t.Fatal(err)
		}
	}
	// The assignments of the 3 clusters just removed stay one generation
	// more; the next write drops them.
	if got, want := listDir(t, filepath.Join(dir, "endpoints")), []string{"c000.json", "c001.json", "c002.json", "c003.json", "c004.json"}; !slices.Equal(got, want) {
		t.Fatalf("endpoints/ just after removing 3 clusters: %v; want %v", got, want)
	}
	res, err := w.WriteOnce()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"endpoints/c002.json", "endpoints/c003.json", "endpoints/c004.json"}; !slices.Equal(res.Removed, want) || len(res.Written) != 0 {
		t.Fatalf("next write: wrote %v, removed %v; want removed %v", res.Written, res.Removed, want)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var gens, names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "..2") {
			gens = append(gens, e.Name())
		} else {
			names = append(names, e.Name())
		}
	}
	if len(gens) != 2 {
		t.Fatalf("generations %v; want the current and the previous", gens)
	}
	if want := []string{"..data", "clusters.json", "endpoints"}; !slices.Equal(names, want) {
		t.Fatalf("top level %v; want %v", names, want)
	}
	if got, _ := os.Readlink(filepath.Join(dir, "..data")); got != gens[1] {
		t.Fatalf("..data -> %q; want the newest generation %q", got, gens[1])
	}
	for _, n := range []string{"clusters.json", "endpoints"} {
		if got, _ := os.Readlink(filepath.Join(dir, n)); got != filepath.Join("..data", n) {
			t.Fatalf("%s -> %q; want ..data/%s", n, got, n)
		}
	}
	if files, want := listDir(t, filepath.Join(dir, "endpoints")), []string{"c000.json", "c001.json"}; !slices.Equal(files, want) {
		t.Fatalf("endpoints/ %v; want %v", files, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "clusters.json"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := decodeFile("clusters.json", b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := resp.Resources[1].UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	src := m.(*cluster.Cluster).EdsClusterConfig.EdsConfig.GetPathConfigSource()
	if src.GetPath() != "/etc/envoy/xds/endpoints/c001.json" || src.GetWatchedDirectory().GetPath() != "/etc/envoy/xds" {
		t.Fatalf("eds_config %v; want path /etc/envoy/xds/endpoints/c001.json, watched_directory /etc/envoy/xds", src)
	}
}

// TestFileName: resource names become safe file names.
func TestFileName(t *testing.T) {
	for in, want := range map[string]string{"web": "web", "a.b-c_d": "a.b-c_d", "..": "%2E.", "a/b": "a%2Fb", "x y": "x%20y"} {
		if got := fileout.FileName(in); got != want {
			t.Errorf("FileName(%q) = %q; want %q", in, got, want)
		}
	}
}

// listDir lists the names in a directory.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// counterValue is the value of a registered counter.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestModeSwitch: a directory written in one mode is taken over by the
// other, back and forth, leaving the other mode's layout behind, every
// file whole.
func TestModeSwitch(t *testing.T) {
	c := xds.NewCache()
	publishClusters(t, c, 3)
	c.MarkReady()
	dir := t.TempDir()
	for i, mode := range []string{fileout.ModePath, fileout.ModeWatchedDirectory, fileout.ModePath, fileout.ModeWatchedDirectory} {
		publishClusters(t, c, 3+i)
		w := newWriter(t, c, fileout.Config{Dir: dir, Mode: mode})
		if _, err := w.WriteOnce(); err != nil {
			t.Fatalf("%d (%s): %v", i, mode, err)
		}
		top := listDir(t, dir)
		var want []string
		if mode == fileout.ModeWatchedDirectory {
			want = []string{"..data", "clusters.yaml", "endpoints"}
			top = slices.DeleteFunc(top, func(n string) bool { return strings.HasPrefix(n, "..2") })
		} else {
			want = []string{"clusters.yaml", "endpoints"}
			if fi, err := os.Lstat(filepath.Join(dir, "endpoints")); err != nil || !fi.IsDir() {
				t.Fatalf("%d (%s): endpoints is not a directory: %v", i, mode, err)
			}
		}
		if !slices.Equal(top, want) {
			t.Fatalf("%d (%s): top level %v; want %v", i, mode, top, want)
		}
		if got := len(listDir(t, filepath.Join(dir, "endpoints"))); got != 3+i {
			t.Fatalf("%d (%s): %d assignment files; want %d", i, mode, got, 3+i)
		}
		for _, p := range []string{"clusters.yaml", "endpoints/c000.yaml"} {
			b, err := os.ReadFile(filepath.Join(dir, p))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := decodeFile(p, b)
			if err == nil {
				err = checkWhole(resp)
			}
			if err != nil {
				t.Fatalf("%d (%s): %s: %v", i, mode, p, err)
			}
		}
	}
}
