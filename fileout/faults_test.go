package fileout_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdsbridge/xdsbridge/fileout"
	"github.com/xdsbridge/xdsbridge/xds"
)

// smallFS mounts a tmpfs of size bytes on a new directory and returns it.
// It needs root (CI runs as root); elsewhere the test is skipped, unless
// XDSBRIDGE_REQUIRE_INTEGRATION=1.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("XDSBRIDGE_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("mount tmpfs: %v: %s", err, out)
		}
		t.Skipf("mount tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// readTree is the layout's files under dir as a reader sees them (through
// the symlinks of mode watched_directory): clusters, listeners, routes
// and endpoints/*, each with its content. Hidden names (temporary files,
// ..data, generations) are not part of it.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, sub := range []string{"", fileout.EndpointsDir} {
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			rel := filepath.Join(sub, e.Name())
			if strings.HasPrefix(e.Name(), ".") || rel == fileout.EndpointsDir {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, rel))
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			out[rel] = string(b)
		}
	}
	return out
}

// wantTree is what a fresh writer with cfg writes for c into an empty
// directory: the layout dir must hold after a successful round.
func wantTree(t *testing.T, c *xds.Cache, cfg fileout.Config) map[string]string {
	t.Helper()
	cfg.Dir = t.TempDir()
	if _, err := fileout.WriteDir(c, cfg, nil); err != nil {
		t.Fatal(err)
	}
	return readTree(t, cfg.Dir)
}

func sameTree(t *testing.T, got, want map[string]string) {
	t.Helper()
	for rel, w := range want {
		if g, ok := got[rel]; !ok {
			t.Errorf("%s missing", rel)
		} else if g != w {
			t.Errorf("%s: stale content", rel)
		}
	}
	for rel := range got {
		if _, ok := want[rel]; !ok {
			t.Errorf("%s: left behind though no longer served", rel)
		}
	}
}

// TestFilesOutputRecoversFromFullDisk: a round that fills the disk
// part-way fails; once the catalog shrinks (content changed, so files
// must be written again), the next round succeeds and leaves exactly the
// served files. The writer must free what the failed round wrote before
// it writes: removing stale files only after every write succeeded never
// recovers.
func TestFilesOutputRecoversFromFullDisk(t *testing.T) {
	for _, mode := range []string{fileout.ModePath, fileout.ModeWatchedDirectory} {
		t.Run(mode, func(t *testing.T) {
			dir := smallFS(t, "96k") // 24 pages: a tmpfs file takes at least one
			c := xds.NewCache()
			c.MarkReady()
			cfg := fileout.Config{Dir: dir, Mode: mode, EnvoyDir: "/etc/envoy/xds"}
			w := newWriter(t, c, cfg)
			publishClusters(t, c, 3)
			if _, err := w.WriteOnce(); err != nil {
				t.Fatalf("first round: %v", err)
			}
			publishClusters(t, c, 60)
			if _, err := w.WriteOnce(); err == nil {
				t.Fatal("60 clusters fit in 96 KiB: the test does not fill the disk")
			}
			publishClusters(t, c, 4)
			if _, err := w.WriteOnce(); err != nil {
				t.Fatalf("after the catalog shrank: %v", err)
			}
			sameTree(t, readTree(t, dir), wantTree(t, c, cfg))
			if st := w.Stats(); st.Failures != 1 {
				t.Fatalf("failures %d, want 1", st.Failures)
			}
		})
	}
}

// TestFilesOutputStaysInItsDirectory: the endpoints directory (mode path)
// or the ..data link (mode watched_directory) is replaced at run time by
// a symlink to a directory outside the output directory, which holds
// files of the layout's names. The next rounds neither write nor remove
// anything there, and the output directory ends up with exactly the
// served files.
func TestFilesOutputStaysInItsDirectory(t *testing.T) {
	for _, mode := range []string{fileout.ModePath, fileout.ModeWatchedDirectory} {
		t.Run(mode, func(t *testing.T) {
			dir, outside := t.TempDir(), t.TempDir()
			c := xds.NewCache()
			c.MarkReady()
			cfg := fileout.Config{Dir: dir, Mode: mode, EnvoyDir: "/etc/envoy/xds"}
			w := newWriter(t, c, cfg)
			publishClusters(t, c, 3)
			if _, err := w.WriteOnce(); err != nil {
				t.Fatal(err)
			}
			// The outside directory looks like an endpoints directory (and
			// like a generation, for ..data).
			for _, rel := range []string{"c000.yaml", "c001.yaml", "c002.yaml", "c003.yaml", "clusters.yaml", "endpoints/c001.yaml"} {
				p := filepath.Join(outside, rel)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte("sentinel "+rel), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			victim := fileout.EndpointsDir
			if mode == fileout.ModeWatchedDirectory {
				victim = "..data"
			}
			if err := os.RemoveAll(filepath.Join(dir, victim)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(dir, victim)); err != nil {
				t.Fatal(err)
			}
			// Removed c002, changed the others, added c003.
			for _, n := range []int{2, 4} {
				publishClusters(t, c, n)
				w.WriteOnce() // may fail; what matters is where it wrote
			}
			if _, err := w.WriteOnce(); err != nil {
				t.Fatalf("the output directory does not recover: %v", err)
			}
			var found []string
			filepath.Walk(outside, func(p string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() {
					rel, _ := filepath.Rel(outside, p)
					found = append(found, rel)
					if b, _ := os.ReadFile(p); !bytes.Equal(b, []byte("sentinel "+rel)) {
						t.Errorf("outside the output directory, %s was written", rel)
					}
				}
				return nil
			})
			if len(found) != 6 {
				t.Errorf("outside the output directory: %v; want the 6 sentinel files", found)
			}
			sameTree(t, readTree(t, dir), wantTree(t, c, cfg))
		})
	}
}

// watchedDirectory returns a writer of mode watched_directory into a new
// directory, its cache serving 3 clusters.
func watchedDirectory(t *testing.T) (string, *xds.Cache, fileout.Config, *fileout.Writer) {
	t.Helper()
	c := xds.NewCache()
	c.MarkReady()
	cfg := fileout.Config{Dir: t.TempDir(), Mode: fileout.ModeWatchedDirectory, EnvoyDir: "/etc/envoy/xds"}
	w := newWriter(t, c, cfg)
	publishClusters(t, c, 3)
	return cfg.Dir, c, cfg, w
}

// TestWatchedDirectoryRepairsLinks: a round of mode watched_directory
// swaps ..data but cannot make a top-level link (a directory in the way
// of its temporary name) and fails. The next round, with nothing changed
// in the catalog, makes the link, whether it is the same writer's retry
// or the first round of a writer restarted (w.cur read from disk); the
// directory then holds exactly the served files. The failed round served
// its files (..data points to them): it reports and counts them; the
// round that repairs the link writes and counts nothing again.
func TestWatchedDirectoryRepairsLinks(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "retry", true: "restart"}[restart], func(t *testing.T) {
			dir, c, cfg, w := watchedDirectory(t)
			blocker := filepath.Join(dir, "clusters"+fileout.Ext(cfg.Format)+"_tmp")
			if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o755); err != nil {
				t.Fatal(err)
			}
			res, err := w.WriteOnce()
			if err == nil {
				t.Fatal("a directory in the way of the clusters link: the round did not fail")
			}
			if len(res.Written) != 4 {
				t.Fatalf("the round that swapped ..data reports written %v; want the clusters and 3 assignments", res.Written)
			}
			if err := os.RemoveAll(blocker); err != nil {
				t.Fatal(err)
			}
			written, failures := uint64(4), uint64(1)
			if restart {
				w = newWriter(t, c, cfg)
				written, failures = 0, 0
			}
			if res, err = w.WriteOnce(); err != nil || len(res.Written)+len(res.Removed) != 0 {
				t.Fatalf("the round after: written %v, removed %v, error %v", res.Written, res.Removed, err)
			}
			if st := w.Stats(); st.Written != written || st.Failures != failures {
				t.Fatalf("written %d, failures %d; want %d, %d", st.Written, st.Failures, written, failures)
			}
			sameTree(t, readTree(t, dir), wantTree(t, c, cfg))
		})
	}
}

// TestWatchedDirectoryCleanupFailureDoesNotBlockUpdates: an old
// generation that cannot be removed (here: busy, a mount point inside;
// on NFS, a reader's open file) fails the clean-up of every round. The
// changed catalog must still be served: the retry with nothing changed
// must not keep the writer "failing" so that the next change is stopped
// by removeGenerations(root, 1) before its generation is written.
func TestWatchedDirectoryCleanupFailureDoesNotBlockUpdates(t *testing.T) {
	dir, c, cfg, w := watchedDirectory(t)
	if _, err := w.WriteOnce(); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "..2000_01_01_00_00_00.000000000", "m")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", old).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", old).Run() })
	publishClusters(t, c, 4)
	w.WriteOnce() // served; the clean-up fails
	sameTree(t, readTree(t, dir), wantTree(t, c, cfg))
	w.WriteOnce() // Run's retry a second later, nothing changed
	publishClusters(t, c, 5)
	w.WriteOnce()
	sameTree(t, readTree(t, dir), wantTree(t, c, cfg))
}

// TestWatchedDirectoryCountsInstalledRounds: rounds of mode
// watched_directory that fail before ..data points to their generation
// (a directory in the way of its temporary link) report nothing written
// and add nothing to the written counter; the round that installs the
// files counts each once.
func TestWatchedDirectoryCountsInstalledRounds(t *testing.T) {
	dir, _, _, w := watchedDirectory(t)
	blocker := filepath.Join(dir, "..data_tmp")
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		res, err := w.WriteOnce()
		if err == nil {
			t.Fatal("a directory in the way of ..data: the round did not fail")
		}
		if len(res.Written)+len(res.Removed) != 0 {
			t.Fatalf("a round that installed nothing reports written %v, removed %v", res.Written, res.Removed)
		}
	}
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	res, err := w.WriteOnce()
	if err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Written != uint64(len(res.Written)) || st.Failures != 3 {
		t.Fatalf("written %d (the installing round wrote %d), failures %d (want 3)", st.Written, len(res.Written), st.Failures)
	}
}
