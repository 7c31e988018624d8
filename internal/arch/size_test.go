package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// servingPackages are the packages docs/architecture.md ("Import
// rules") keeps in small pieces: the stream server and the store.
var servingPackages = []string{"xds", "xds/store"}

const (
	maxFileLines = 550 // about 500
	maxFuncLines = 90  // about 80
)

// TestServingPackagesSmallPieces: no non-test file of the serving
// packages is over about 500 lines and no function over about 80, so that
// each rule reads in one place.
func TestServingPackagesSmallPieces(t *testing.T) {
	fset := token.NewFileSet()
	n := 0
	for _, pkg := range servingPackages {
		files, err := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			n++
			name := filepath.ToSlash(filepath.Join(pkg, filepath.Base(path)))
			if lines := fset.File(f.Pos()).LineCount(); lines > maxFileLines {
				t.Errorf("%s: %d lines (at most %d): split it by concern", name, lines, maxFileLines)
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; lines > maxFuncLines {
					t.Errorf("%s: %s is %d lines (at most %d)", name, fd.Name.Name, lines, maxFuncLines)
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("found only %d files in %v", n, servingPackages)
	}
}
