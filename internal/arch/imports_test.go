package arch

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/xdsbridge/xdsbridge"

// projectImports maps each package of the module (its path relative to
// the module root) to the module's packages its non-test files import.
func projectImports(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (name == "testdata" || name == "tools" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		var imps []string
		for _, imp := range pkg.Imports {
			if p, ok := strings.CutPrefix(imp, module+"/"); ok {
				imps = append(imps, p)
			}
		}
		out[filepath.ToSlash(rel)] = imps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out["internal/app"]) == 0 || len(out["bridge"]) == 0 {
		t.Fatalf("the walk found no imports of internal/app or bridge: %v", out)
	}
	return out
}

// TestConfigImportsOnlyItsDecoder: config is the file's schema: of the
// module it imports config/decode and nothing else, so that the packages
// that serve (xds, translate, the outputs) never need the file's types.
func TestConfigImportsOnlyItsDecoder(t *testing.T) {
	imps := projectImports(t)
	for _, pkg := range []string{"config", "config/decode"} {
		for _, imp := range imps[pkg] {
			if imp != "config/decode" {
				t.Errorf("%s imports %s; it may import config/decode only (the app maps the config to each package's options)", pkg, imp)
			}
		}
	}
}

// TestConfigImportedByTheAppOnly: the config's schema is mapped to each
// package's options by the app: only the binaries (cmd/...), internal/app
// and internal/certs (the TLS files a config names) import config; every
// other package, healthcheck and bridge among them, takes options.
func TestConfigImportedByTheAppOnly(t *testing.T) {
	allowed := func(pkg string) bool {
		return strings.HasPrefix(pkg, "cmd/") || pkg == "internal/app" || pkg == "internal/certs" || strings.HasPrefix(pkg, "config")
	}
	imps := projectImports(t)
	pkgs := make([]string, 0, len(imps))
	for pkg := range imps {
		pkgs = append(pkgs, pkg)
	}
	slices.Sort(pkgs)
	for _, pkg := range pkgs {
		if !allowed(pkg) && slices.Contains(imps[pkg], "config") {
			t.Errorf("%s imports config; only the app maps the config (give %s options instead)", pkg, pkg)
		}
	}
}

// TestStoreImportsNoServer: the store (xds/store) holds the resources and
// knows nothing of clients: it imports no package of the module, so
// neither the server (xds: the stream handlers, REST, sync status, the
// guard, authorization) nor what the server uses. The server follows the
// store through the store's Observer, never the other way.
func TestStoreImportsNoServer(t *testing.T) {
	imps := projectImports(t)
	if _, ok := imps["xds/store"]; !ok {
		t.Fatal("the walk did not find xds/store")
	}
	for _, imp := range imps["xds/store"] {
		t.Errorf("xds/store imports %s; the store imports no package of the module (the server reaches the store, not the reverse)", imp)
	}
}
