// Package layering checks that agq's packages depend on each other in one
// direction: cmd → commands / dashboard → engine → registry, scheduler,
// watchdog → store → pgx.
package layering

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agq/agq/"

// imports lists, for each package of the module, the packages it imports
// itself (test files aside).
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		m[strings.TrimPrefix(f[0], module)] = f[1:]
	}
	return m
}

// deps lists every package pkg depends on, directly or not.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

func isPgx(path string) bool { return strings.HasPrefix(path, "github.com/jackc/") }

func TestEachLayerImportsOnlyTheLayersBelowIt(t *testing.T) {
	all := imports(t)
	refuse := map[string][]string{
		// The wire layer and the dashboard reach jobs through the engine
		// alone.
		"commands":           {"store"},
		"commands/keyspace":  {"store", "commands"},
		"commands/pubsub":    {"store", "commands"},
		"internal/dashboard": {"store", "commands"},
		// The engine returns domain errors, never replies.
		"engine": {"commands", "resp", "internal/dashboard"},
	}
	for pkg, banned := range refuse {
		imps, ok := all[pkg]
		if !ok {
			t.Fatalf("package %s not found", pkg)
		}
		for _, imp := range imps {
			for _, b := range banned {
				if imp == module+b {
					t.Errorf("%s imports %s", pkg, b)
				}
			}
			if pkg != "engine" && isPgx(imp) {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
	// The bottom layers import no package of agq but the records, which
	// import none, nor any driver.
	for pkg, allowed := range map[string]string{"records": "", "resp": "", "migrations": "", "internal/names": "",
		"internal/logging": "", "internal/otlp": "", "internal/plainjson": "", "store": "records", "engine/api": "records"} {
		for _, imp := range all[pkg] {
			if strings.HasPrefix(imp, module) && imp != module+allowed {
				t.Errorf("%s imports %s", pkg, strings.TrimPrefix(imp, module))
			}
			if pkg == "records" && isPgx(imp) {
				t.Errorf("records imports %s", imp)
			}
		}
	}
}

// Every exported type of the server is declared once: no package keeps a
// copy of another's records.
func TestNoExportedTypeIsDeclaredInTwoServerPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{.Dir}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	where := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		if !server(pkg) {
			continue
		}
		for _, name := range exportedTypes(t, f[1]) {
			where[name] = append(where[name], pkg)
		}
	}
	for name, pkgs := range where {
		if len(pkgs) > 1 && !sameNameOtherThing[name] {
			t.Errorf("type %s is declared in %v", name, pkgs)
		}
	}
}

// The wire layer and the dashboard depend on the engine's API alone: no
// path from them, direct or not, reaches store or pgx.
func TestTheWireLayerDependsOnNeitherStoreNorPgx(t *testing.T) {
	for _, pkg := range []string{"commands", "commands/keyspace", "commands/pubsub", "internal/dashboard"} {
		for _, d := range deps(t, pkg) {
			if d == module+"store" || isPgx(d) {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}

// sharedWithClients are the packages the client and agw may share with
// the server: small, importing nothing of agq, and about neither jobs nor
// the wire.
var sharedWithClients = []string{
	"internal/logging",   // the logger agq and agw write
	"internal/otlp",      // the OTEL_* variables, read the same way by agq and agw
	"internal/plainjson", // the client's reports, and agw's measure of them
}

// The client library, and agw built on it, depend on no package of the
// server, directly or not, nor on pgx: of agq, only on each other and
// sharedWithClients.
func TestTheClientAndAgwDependOnNoServerPackage(t *testing.T) {
	for _, pkg := range []string{"client/...", "cmd/agw/..."} {
		for _, d := range deps(t, pkg) {
			if isPgx(d) {
				t.Errorf("%s depends on %s", pkg, d)
			}
			p, ok := strings.CutPrefix(d, module)
			if !ok || p == "client" || p == "cmd/agw" || strings.HasPrefix(p, "cmd/agw/") || slices.Contains(sharedWithClients, p) {
				continue
			}
			t.Errorf("%s depends on %s", pkg, p)
		}
	}
}
