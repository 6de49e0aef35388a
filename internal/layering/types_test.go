package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sameNameOtherThing are names two server packages use for things that
// are not the same record: each package's own configuration, the
// protocol's input limits beside a queue's, and the engine beside the
// interface its callers hold.
var sameNameOtherThing = map[string]bool{"Config": true, "Limits": true, "Engine": true}

// server reports whether pkg is part of the server: the client, the
// worker binary, the tests' harness, the chaos run with its Patroni
// cluster and the benchmark are not.
func server(pkg string) bool {
	for _, p := range []string{"client", "cmd/agw", "e2e", "bench", "internal/agqtest", "internal/chaos", "internal/patroni", "cmd/agqchaos"} {
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return false
		}
	}
	return true
}

// exportedTypes lists the exported types declared in dir's Go files, test
// files aside.
func exportedTypes(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
						names = append(names, ts.Name.Name)
					}
				}
			}
		}
	}
	return names
}
