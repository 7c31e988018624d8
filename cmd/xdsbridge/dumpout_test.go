package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDumpOut: `dump -out DIR` writes the files of the filesystem
// output once and exits; run again on the same content it writes nothing;
// -format and -mode choose the encoding and the replacement style; bad
// values name the flag.
func TestDumpOut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "files")
	args := []string{"dump", "-config", "../../examples/xdsbridge.yaml", "-out", dir}
	var out, errOut bytes.Buffer
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if got := out.String(); got != "wrote 6 files to "+dir+"\n" {
		t.Fatalf("output %q; want clusters, listeners, routes and 3 assignments", got)
	}
	var eps []string
	ents, _ := os.ReadDir(filepath.Join(dir, "endpoints"))
	for _, e := range ents {
		eps = append(eps, e.Name())
	}
	if want := []string{"api.yaml", "legacy.yaml", "web.yaml"}; !slices.Equal(eps, want) {
		t.Fatalf("endpoints/ %v; want %v", eps, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "clusters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "path: " + filepath.Join(dir, "endpoints", "web.yaml"); !strings.Contains(string(b), want) {
		t.Fatalf("clusters.yaml lacks %q:\n%s", want, b)
	}
	out.Reset()
	if err := run(args, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "wrote 0 files to "+dir+"\n" {
		t.Fatalf("second dump: %q; want nothing written", got)
	}

	dir2 := filepath.Join(t.TempDir(), "files")
	out.Reset()
	if err := run([]string{"dump", "-config", "../../examples/xdsbridge.yaml", "-out", dir2, "-format", "proto", "-mode", "watched_directory"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dir2, "clusters.pb")); err != nil || target != "..data/clusters.pb" {
		t.Fatalf("clusters.pb -> %q, %v; want ..data/clusters.pb", target, err)
	}

	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"-format", "xml"}, `-format: "xml" is not one of yaml, json, proto`},
		{[]string{"-mode", "copy"}, `-mode: "copy" is not one of path, watched_directory`},
	} {
		a := append([]string{"dump", "-config", "../../examples/xdsbridge.yaml", "-out", t.TempDir()}, tc.flags...)
		if err := run(a, &out, &errOut); err == nil || err.Error() != tc.want {
			t.Errorf("%v: error %v; want %q", tc.flags, err, tc.want)
		}
	}
	// Without -out, proto is not a format dump prints.
	if err := run([]string{"dump", "-config", "../../examples/xdsbridge.yaml", "-format", "proto"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "-format") {
		t.Errorf("dump -format proto without -out: %v", err)
	}
}

// TestValidateFilesExample: examples/xdsbridge-files.yaml is valid.
func TestValidateFilesExample(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"validate", "-config", "../../examples/xdsbridge-files.yaml"}, &out, &out); err != nil {
		t.Fatal(err)
	}
}
