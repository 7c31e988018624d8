// Package fileout writes the bridge's resources as files for Envoy's
// path-based config sources (path_config_source), for Envoys with no
// network path to the bridge: a shared volume, a ConfigMap sync.
//
// The layout of Dir, with the yaml format:
//
//	clusters.yaml          DiscoveryResponse of every Cluster; each EDS
//	                       cluster's eds_config is a path_config_source
//	                       naming its file below
//	endpoints/NAME.yaml    DiscoveryResponse of one ClusterLoadAssignment
//	                       (Envoy's EDS takes exactly one per response)
//	listeners.yaml         DiscoveryResponse of every Listener, and
//	routes.yaml            of every RouteConfiguration, when there are any
//	                       (the API listeners of proxyless gRPC clients)
//
// Each file's version_info is a hash of its content, and a file is
// written only when its content changes. A file is replaced atomically,
// as Envoy's file watcher needs: in mode "path" a temporary file in the
// same directory is renamed over it (Envoy watches for that move); in
// mode "watched_directory" the whole set is written to a new
// timestamped directory ..YYYY_MM_DD_HH_MM_SS.NNNNNNNNN and the ..data
// symlink is swapped to it by a rename, Kubernetes-style (the names above
// are symlinks through ..data; Envoy watches Dir for the move). Either way
// a reader sees the old file or the new one, never a part.
//
// In mode "path" the files are replaced make-before-break: new and changed
// assignments first, then clusters, then the assignments of removed
// clusters are deleted.
package fileout

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// Registers every type the translator puts in an Any (HCM, router,
	// ...), which the JSON and YAML encodings must resolve.
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
	_ "github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// EndpointsDir is the subdirectory of the per-cluster assignment files.
const EndpointsDir = "endpoints"

// dataLink and the prefix of generation directories (mode
// watched_directory), as Kubernetes' atomic writer names them.
const (
	dataLink  = "..data"
	genPrefix = "..2"
)

// Writer keeps Dir in step with a cache.
type Writer struct {
	cache    *xds.Cache
	cfg      Config
	dir      string // absolute
	envoyDir string
	log      *slog.Logger

	// cur is the content of each file (path relative to dir) as last
	// written or found on disk; nil until the first write.
	cur map[string][]byte
	// memo is each file as last rendered, so that only files whose
	// resources changed are encoded again.
	memo map[string]encoded
	// carried are the assignments of removed clusters kept in the
	// current generation (mode watched_directory, see swap).
	carried map[string]bool
	// named are the assignment files that the clusters file on disk
	// may name (mode path); nil until the writer wrote or confirmed it.
	named map[string]bool
	// failing is whether the last round failed.
	failing bool

	rounds, written, removed, failures atomic.Uint64
}

// New returns a writer of cfg (with defaults applied and checked) that
// follows c. It creates cfg.Dir.
func New(c *xds.Cache, cfg Config, log *slog.Logger) (*Writer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("dir: %w", err)
	}
	envoyDir := cfg.EnvoyDir
	if envoyDir == "" {
		envoyDir = dir
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Writer{cache: c, cfg: cfg, dir: dir, envoyDir: envoyDir, log: log}, nil
}

// Stats counts the writer's work.
type Stats struct {
	Rounds   uint64 // WriteOnce calls
	Written  uint64 // files written (replaced or new)
	Removed  uint64 // files removed
	Failures uint64 // rounds that failed
}

// Stats returns the writer's counters.
func (w *Writer) Stats() Stats {
	return Stats{Rounds: w.rounds.Load(), Written: w.written.Load(), Removed: w.removed.Load(), Failures: w.failures.Load()}
}

// Run writes the files once the cache is ready, then again Debounce after
// each change, until ctx is done. A failed write is logged and retried
// after a second; it does not stop the bridge.
func (w *Writer) Run(ctx context.Context) error {
	ch, cancel := w.cache.Subscribe()
	defer cancel()
	var retry <-chan time.Time
	var failed int       // rounds failed in a row
	var logged time.Time // when the last of them was logged
	for {
		if w.cache.Ready() {
			retry = nil
			_, err := w.WriteOnce()
			switch {
			case err != nil:
				failed++
				// The first failure, then one line every 30 s while it lasts.
				if failed == 1 || time.Since(logged) >= 30*time.Second {
					w.log.Warn("filesystem output: write failed; retrying every second", "dir", w.dir, "err", err, "failed_rounds", failed)
					logged = time.Now()
				}
				retry = time.After(time.Second)
			case failed > 0:
				w.log.Info("filesystem output: writing again", "dir", w.dir, "failed_rounds", failed)
				failed = 0
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		case <-retry:
		}
		t := time.NewTimer(w.cfg.Debounce.D())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Result is what one WriteOnce did.
type Result struct {
	Written []string // files written, relative to Dir
	Removed []string // files removed
	// Versions is the version_info of each file, relative to Dir.
	Versions map[string]string
}

// WriteOnce writes the cache's current resources, replacing only the
// files whose content changed.
func (w *Writer) WriteOnce() (Result, error) {
	w.rounds.Add(1)
	res, err := w.writeOnce()
	w.written.Add(uint64(len(res.Written)))
	w.removed.Add(uint64(len(res.Removed)))
	if err != nil {
		w.failures.Add(1)
	}
	return res, err
}

func (w *Writer) writeOnce() (Result, error) {
	// Every path below is resolved inside Dir: a symlink that leads out
	// of it (an endpoints directory swapped for a link to elsewhere) fails
	// the operation instead of writing or deleting there.
	root, err := os.OpenRoot(w.dir)
	if err != nil {
		return Result{}, fmt.Errorf("dir: %w", err)
	}
	defer root.Close()
	first := w.cur == nil
	if first {
		if w.cfg.Mode == ModePath {
			// Left by mode watched_directory: its endpoints symlink.
			if fi, err := root.Lstat(EndpointsDir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				root.Remove(EndpointsDir)
			}
		}
		w.cur = w.onDisk(root)
	}
	files, versions, err := w.render()
	if err != nil {
		return Result{}, err
	}
	res := Result{Versions: versions}
	if w.cfg.Mode == ModeWatchedDirectory {
		err = w.swap(root, files, &res, first)
	} else if err = w.replace(root, files, &res); err == nil && first {
		// Left by mode watched_directory: ..data and its generations.
		ents, _ := fs.ReadDir(root.FS(), ".")
		for _, e := range ents {
			if n := e.Name(); strings.HasPrefix(n, genPrefix) || n == dataLink || n == dataLink+"_tmp" {
				root.RemoveAll(n)
			}
		}
	}
	w.failing = err != nil
	return res, err
}

// file is one file to write, relative to the directory.
type file struct {
	rel  string
	data []byte
}

// render encodes the current resources into the files of the layout, in
// make-before-break order: assignments, clusters, listeners, routes.
func (w *Writer) render() ([]file, map[string]string, error) {
	snap := w.cache.Snapshot(xds.ClusterType, xds.EndpointType, xds.ListenerType, xds.RouteType)
	ext := Ext(w.cfg.Format)
	var files []file
	versions := map[string]string{}
	memo := make(map[string]encoded, len(w.memo))
	// add encodes the file of infos, or takes it from the last render if
	// the resources' versions (content hashes) are the same.
	add := func(rel, typeURL string, infos []store.ResourceInfo, edit func(proto.Message) proto.Message) error {
		h := sha256.New()
		msgs := make([]proto.Message, 0, len(infos))
		for _, ri := range infos {
			fmt.Fprintf(h, "%s\x00%s\x00", ri.Name, ri.Version)
			msgs = append(msgs, ri.Msg)
		}
		key := string(h.Sum(nil))
		e, ok := w.memo[rel]
		if !ok || e.key != key {
			for i, m := range msgs {
				msgs[i] = edit(m)
			}
			data, version, err := encode(typeURL, msgs, w.cfg.Format)
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			e = encoded{key: key, data: data, version: version}
		}
		memo[rel] = e
		files = append(files, file{rel: rel, data: e.data})
		versions[rel] = e.version
		return nil
	}
	same := func(m proto.Message) proto.Message { return m }
	for _, ri := range snap[xds.EndpointType] {
		if err := add(filepath.Join(EndpointsDir, FileName(ri.Name)+ext), xds.EndpointType, []store.ResourceInfo{ri}, same); err != nil {
			return nil, nil, err
		}
	}
	if err := add("clusters"+ext, xds.ClusterType, snap[xds.ClusterType], w.withFileEDS); err != nil {
		return nil, nil, err
	}
	for _, t := range []struct{ name, url string }{{"listeners", xds.ListenerType}, {"routes", xds.RouteType}} {
		rel := t.name + ext
		if len(snap[t.url]) == 0 && w.cur[rel] == nil {
			continue // never had any: no file
		}
		if err := add(rel, t.url, snap[t.url], same); err != nil {
			return nil, nil, err
		}
	}
	w.memo = memo
	return files, versions, nil
}

// encoded is a file as last rendered: key hashes the names and versions
// of its resources.
type encoded struct {
	key, version string
	data         []byte
}

// withFileEDS returns a copy of an EDS cluster whose eds_config reads
// its assignment's file; other messages are returned as they are.
func (w *Writer) withFileEDS(m proto.Message) proto.Message {
	c, ok := m.(*cluster.Cluster)
	if !ok || c.GetEdsClusterConfig() == nil {
		return m
	}
	c = proto.Clone(c).(*cluster.Cluster)
	name := c.EdsClusterConfig.ServiceName
	if name == "" {
		name = c.Name
	}
	src := &core.PathConfigSource{Path: filepath.Join(w.envoyDir, EndpointsDir, FileName(name)+Ext(w.cfg.Format))}
	if w.cfg.Mode == ModeWatchedDirectory {
		src.WatchedDirectory = &core.WatchedDirectory{Path: w.envoyDir}
	}
	c.EdsClusterConfig.EdsConfig = &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_PathConfigSource{PathConfigSource: src},
	}
	return c
}

// encode builds the DiscoveryResponse of msgs and encodes it. Its
// version_info is a hash of the resources' deterministic encoding.
func encode(typeURL string, msgs []proto.Message, format string) ([]byte, string, error) {
	det := proto.MarshalOptions{Deterministic: true}
	resp := &discovery.DiscoveryResponse{TypeUrl: typeURL, Resources: make([]*anypb.Any, 0, len(msgs))}
	h := sha256.New()
	h.Write([]byte(typeURL))
	for _, m := range msgs {
		a := &anypb.Any{}
		if err := anypb.MarshalFrom(a, m, det); err != nil {
			return nil, "", err
		}
		resp.Resources = append(resp.Resources, a)
		fmt.Fprintf(h, "\x00%d\x00", len(a.Value))
		h.Write(a.Value)
	}
	resp.VersionInfo = hex.EncodeToString(h.Sum(nil)[:8])
	var out []byte
	var err error
	switch format {
	case FormatProto:
		out, err = det.Marshal(resp)
	default:
		var js []byte
		if js, err = protojson.Marshal(resp); err != nil {
			break
		}
		if format == FormatYAML {
			// Keys sorted, whitespace fixed: the same content is the
			// same bytes, whatever protojson's whitespace.
			out, err = yaml.JSONToYAML(js)
			break
		}
		var buf bytes.Buffer
		if err = json.Indent(&buf, js, "", "  "); err == nil {
			buf.WriteByte('\n')
			out = buf.Bytes()
		}
	}
	if err != nil {
		return nil, "", err
	}
	return out, resp.VersionInfo, nil
}

// FileName is the file name (without extension) of a resource name:
// letters, digits, '-', '_' and '.' are kept, every other byte is
// %XX-escaped, and so is a leading '.' (no hidden files, no "..").
func FileName(name string) string {
	var sb strings.Builder
	for i := 0; i < len(name); i++ {
		b := name[i]
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '-', b == '_', b == '.' && i > 0:
			sb.WriteByte(b)
		default:
			fmt.Fprintf(&sb, "%%%02X", b)
		}
	}
	return sb.String()
}

// managed reports whether rel is a file of the layout (any format), which
// the writer may remove when it is no longer served.
func managed(rel string) bool {
	ext := filepath.Ext(rel)
	switch ext {
	case ".yaml", ".json", ".pb":
	default:
		return false
	}
	switch d, base := filepath.Split(rel); d {
	case "":
		b := strings.TrimSuffix(base, ext)
		return b == "clusters" || b == "listeners" || b == "routes"
	case EndpointsDir + string(filepath.Separator):
		return !strings.HasPrefix(base, ".")
	}
	return false
}

// onDisk reads the files of the layout as they are (through ..data in
// mode watched_directory), so that a restarted writer rewrites nothing
// unchanged.
func (w *Writer) onDisk(root *os.Root) map[string][]byte {
	base := "."
	if w.cfg.Mode == ModeWatchedDirectory {
		base = dataLink
	}
	out := map[string][]byte{}
	for _, sub := range []string{"", EndpointsDir} {
		ents, _ := fs.ReadDir(root.FS(), path.Join(base, sub))
		for _, e := range ents {
			rel := filepath.Join(sub, e.Name())
			switch {
			case !e.Type().IsRegular():
			case strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp-"):
				// A temporary file of an interrupted writeAtomic.
				root.Remove(filepath.Join(base, rel))
			case managed(rel):
				if b, err := root.ReadFile(filepath.Join(base, rel)); err == nil {
					out[rel] = b
				}
			}
		}
	}
	return out
}

// replace is mode path: each changed file is written to a temporary file
// in its directory and renamed over the old one, in order; files no
// longer served are removed last. Assignments that neither the new files
// nor the clusters file on disk name are removed first, so that a round
// that failed part-way (a full disk) frees what it wrote before the next
// one writes.
func (w *Writer) replace(root *os.Root, files []file, res *Result) error {
	if err := w.endpointsDir(root); err != nil {
		return err
	}
	keep := make(map[string]bool, len(files))
	for _, f := range files {
		keep[f.rel] = true
	}
	if w.named != nil {
		if err := w.remove(root, res, func(rel string) bool {
			return !keep[rel] && !w.named[rel] && filepath.Dir(rel) == EndpointsDir
		}); err != nil {
			return err
		}
	}
	clusters := "clusters" + Ext(w.cfg.Format)
	for _, f := range files {
		if old, ok := w.cur[f.rel]; !ok || !bytes.Equal(old, f.data) {
			if err := writeAtomic(root, f.rel, f.data); err != nil {
				return err
			}
			w.cur[f.rel] = f.data
			res.Written = append(res.Written, f.rel)
		}
		if f.rel == clusters {
			// The assignments rendered with these clusters: a superset
			// of the files their eds_config names.
			w.named = make(map[string]bool, len(files))
			for _, g := range files {
				if filepath.Dir(g.rel) == EndpointsDir {
					w.named[g.rel] = true
				}
			}
		}
	}
	return w.remove(root, res, func(rel string) bool { return !keep[rel] })
}

// remove removes the files of cur that gone selects, in name order.
func (w *Writer) remove(root *os.Root, res *Result, gone func(rel string) bool) error {
	var rels []string
	for rel := range w.cur {
		if gone(rel) {
			rels = append(rels, rel)
		}
	}
	sort.Strings(rels)
	for _, rel := range rels {
		if err := root.Remove(rel); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		delete(w.cur, rel)
		res.Removed = append(res.Removed, rel)
	}
	return nil
}

// endpointsDir makes sure EndpointsDir is a directory of Dir itself: a
// symlink or file put in its place is removed (never what it points to),
// and the assignments recorded in it are written again.
func (w *Writer) endpointsDir(root *os.Root) error {
	fi, err := root.Lstat(EndpointsDir)
	if err == nil && fi.IsDir() {
		return nil
	}
	if err == nil {
		w.log.Warn("filesystem output: the endpoints directory was replaced by something else; making it a directory again", "path", filepath.Join(w.dir, EndpointsDir), "mode", fi.Mode().String())
		if err := root.Remove(EndpointsDir); err != nil {
			return err
		}
		for rel := range w.cur {
			if filepath.Dir(rel) == EndpointsDir {
				delete(w.cur, rel)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return root.Mkdir(EndpointsDir, 0o755)
}

// writeAtomic replaces rel (inside root) with data by a rename from a
// temporary file in the same directory.
func writeAtomic(root *os.Root, rel string, data []byte) error {
	dir, base := filepath.Split(rel)
	var f *os.File
	var tmp string
	var err error
	for range 100 {
		tmp = filepath.Join(dir, "."+base+".tmp-"+strconv.FormatUint(rand.Uint64(), 36))
		if f, err = root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); !errors.Is(err, os.ErrExist) {
			break
		}
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		root.Remove(tmp)
	}
	return err
}

// swap is mode watched_directory: if any file changed, the whole set is
// written to a new generation directory, ..data is swapped to it by a
// rename, the top-level names are made symlinks through ..data, and
// generations older than the previous one are removed (a reader that
// resolved ..data just before the swap may still be reading the
// previous one). After a failed round every generation but the current
// one is removed before the next is written, to free the space a full
// disk needs.
//
// first is the first round of the writer (w.cur read from disk): a
// previous process may have swapped ..data and stopped or failed before
// its links, so they are made again as after a failed round.
//
// A round that fails before ..data points to its generation wrote
// nothing a reader sees: it reports nothing written or removed.
func (w *Writer) swap(root *os.Root, files []file, res *Result, first bool) (err error) {
	installed := false
	defer func() {
		if err != nil && !installed {
			res.Written, res.Removed = nil, nil
		}
	}()
	// The assignment of a removed cluster stays one generation more:
	// on the swap every subscription of the directory reads again, the
	// removed cluster's EDS perhaps before CDS removes the cluster, and it
	// must find its file. (Make before break, as mode path orders it.)
	rendered := make(map[string]bool, len(files))
	for _, f := range files {
		rendered[f.rel] = true
	}
	carried := map[string]bool{}
	for rel, data := range w.cur {
		if !rendered[rel] && filepath.Dir(rel) == EndpointsDir && !w.carried[rel] {
			files = append(files, file{rel: rel, data: data})
			carried[rel] = true
		}
	}
	same := len(files) == len(w.cur)
	for _, f := range files {
		if old, ok := w.cur[f.rel]; !ok || !bytes.Equal(old, f.data) {
			same = false
			res.Written = append(res.Written, f.rel)
		}
	}
	if same {
		if w.failing || first {
			// The last round may have swapped ..data and failed after:
			// its links and clean-up are made again.
			return linkTop(root, topNames(w.cur))
		}
		return nil
	}
	res.Written = slices.DeleteFunc(res.Written, func(rel string) bool { return carried[rel] })
	keep := make(map[string]bool, len(files))
	for _, f := range files {
		keep[f.rel] = true
	}
	for rel := range w.cur {
		if !keep[rel] {
			res.Removed = append(res.Removed, rel)
		}
	}
	sort.Strings(res.Removed)
	if w.failing {
		// Best effort: an old generation that cannot be removed must not
		// stop the new one (if space is short, its write fails by itself).
		if err := removeGenerations(root, 1); err != nil {
			w.log.Warn("filesystem output: removing old generations", "dir", w.dir, "err", err)
		}
	}
	gen, err := w.newGeneration(root)
	if err != nil {
		return err
	}
	if err := root.MkdirAll(filepath.Join(gen, EndpointsDir), 0o755); err != nil {
		return err
	}
	next := make(map[string][]byte, len(files))
	top := map[string]bool{EndpointsDir: true}
	for _, f := range files {
		if err := root.WriteFile(filepath.Join(gen, f.rel), f.data, 0o644); err != nil {
			root.RemoveAll(gen)
			return err
		}
		next[f.rel] = f.data
		if !strings.Contains(f.rel, string(filepath.Separator)) {
			top[f.rel] = true
		}
	}
	if err := symlinkAtomic(root, gen, dataLink); err != nil {
		root.RemoveAll(gen)
		return err
	}
	installed = true
	w.cur, w.carried = next, carried
	return linkTop(root, top)
}

// topNames are the top-level names of the files of cur, and the
// endpoints directory.
func topNames(cur map[string][]byte) map[string]bool {
	top := map[string]bool{EndpointsDir: true}
	for rel := range cur {
		if !strings.Contains(rel, string(filepath.Separator)) {
			top[rel] = true
		}
	}
	return top
}

// linkTop makes each name of top a link into ..data, removes the links of
// files no longer served, and the old generations.
func linkTop(root *os.Root, top map[string]bool) error {
	for name := range top {
		want := filepath.Join(dataLink, name)
		if got, err := root.Readlink(name); err == nil && got == want {
			continue
		}
		if fi, err := root.Lstat(name); err == nil && fi.IsDir() {
			root.RemoveAll(name) // mode path's endpoints directory
		}
		if err := symlinkAtomic(root, want, name); err != nil {
			return err
		}
	}
	// Top-level links of files no longer served, and old generations.
	ents, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if e.Type()&os.ModeSymlink != 0 && !top[name] && name != dataLink {
			if target, err := root.Readlink(name); err == nil && strings.HasPrefix(target, dataLink+string(filepath.Separator)) {
				root.Remove(name)
			}
		}
	}
	return removeGenerations(root, 2)
}

// removeGenerations removes the generation directories but the newest
// keep ones and the one ..data points to.
func removeGenerations(root *os.Root, keep int) error {
	ents, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return err
	}
	cur, _ := root.Readlink(dataLink)
	var gens []string
	for _, e := range ents {
		if name := e.Name(); strings.HasPrefix(name, genPrefix) && e.IsDir() {
			gens = append(gens, name)
		}
	}
	sort.Strings(gens) // timestamps: oldest first
	for i, g := range gens {
		if g != cur && i < len(gens)-keep {
			if err := root.RemoveAll(g); err != nil {
				return err
			}
		}
	}
	return nil
}

// newGeneration names a generation directory after the time, unused.
func (w *Writer) newGeneration(root *os.Root) (string, error) {
	now := time.Now().UTC()
	for i := 0; i < 1000; i++ {
		name := ".." + now.Format("2006_01_02_15_04_05.000000000")
		if i > 0 {
			name += fmt.Sprintf("_%03d", i)
		}
		if _, err := root.Lstat(name); errors.Is(err, os.ErrNotExist) {
			return name, nil
		}
	}
	return "", errors.New("no free generation directory name")
}

// symlinkAtomic makes link a symlink to target, replacing what is there by
// a rename.
func symlinkAtomic(root *os.Root, target, link string) error {
	tmp := link + "_tmp"
	root.Remove(tmp)
	if err := root.Symlink(target, tmp); err != nil {
		return err
	}
	if err := root.Rename(tmp, link); err != nil {
		root.Remove(tmp)
		return err
	}
	return nil
}

// WriteDir writes the cache's resources into cfg.Dir once (replacing only
// what changed there), for `xdsbridge dump -out DIR`.
func WriteDir(c *xds.Cache, cfg Config, log *slog.Logger) (Result, error) {
	w, err := New(c, cfg, log)
	if err != nil {
		return Result{}, err
	}
	return w.WriteOnce()
}

// Register exports the writer's counters (Stats) to reg, as
// xdsbridge_files_{rounds,written,removed,write_failures}_total.
func (w *Writer) Register(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	for _, m := range []struct {
		name, help string
		v          *atomic.Uint64
	}{
		{"xdsbridge_files_rounds_total", "Rounds of the filesystem output: the served resources compared with the files.", &w.rounds},
		{"xdsbridge_files_written_total", "Files the filesystem output wrote (new or changed content).", &w.written},
		{"xdsbridge_files_removed_total", "Files the filesystem output removed (resources no longer served).", &w.removed},
		{"xdsbridge_files_write_failures_total", "Rounds of the filesystem output that failed (retried after a second).", &w.failures},
	} {
		if err := promreg.Register(reg, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help}, func() float64 { return float64(m.v.Load()) })); err != nil {
			panic(err)
		}
	}
}
