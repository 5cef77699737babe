package sandbox

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// The architecture's acceptance checks, on `go list`'s view of the module.

const module = "github.com/agentsandbox/sandbox"

type listedPackage struct {
	ImportPath, Name                   string
	Imports, TestImports, XTestImports []string
	Deps                               []string
}

// listModule is `go list -deps`'s view of every package of the module.
func listModule(t *testing.T) map[string]listedPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Name,Imports,TestImports,XTestImports,Deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p
	}
	if len(pkgs) < 50 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

// own is the module's packages among imports, relative to the module.
func own(imports []string) []string {
	var out []string
	for _, i := range imports {
		if i == module || strings.HasPrefix(i, module+"/") {
			out = append(out, strings.TrimPrefix(strings.TrimPrefix(i, module), "/"))
		}
	}
	return out
}

// testSupport says whether a package exists for tests only: the rigs under
// internal/testsupport, the importable test doubles and suites (…test), and the
// integration tests.
func testSupport(path string) bool {
	last := path[strings.LastIndex(path, "/")+1:]
	return strings.HasPrefix(path, "internal/testsupport/") || strings.HasSuffix(last, "test") || path == "integration"
}

// TestContractsOwnTheirTypes: a wire contract imports nothing of the module but
// errdefs, so neither end drags the other's types (or port's) onto the wire.
func TestContractsOwnTheirTypes(t *testing.T) {
	pkgs := listModule(t)
	n := 0
	for path, p := range pkgs {
		if path != "api" && !strings.HasPrefix(path, "api/") {
			continue
		}
		n++
		for _, imp := range own(p.Imports) {
			if imp != "errdefs" {
				t.Errorf("the contract %s imports %s", path, imp)
			}
		}
	}
	if n < 3 {
		t.Errorf("found %d contract packages", n)
	}
}

// TestPortAboveTheContracts: port stands on errdefs and the bridge's contract only
// (api sits below it, never above).
func TestPortAboveTheContracts(t *testing.T) {
	for _, imp := range own(listModule(t)["port"].Imports) {
		if imp != "errdefs" && imp != "api/bridgeapi" {
			t.Errorf("port imports %s", imp)
		}
	}
}

// TestNoHostImportsTheBridgeProgram: the in-sandbox program's code (cmd/sandbox-bridge
// and what of the module it links but the contracts) is its own; the host side
// (runners, pools, sessions, suites, their tests) takes only its contract.
func TestNoHostImportsTheBridgeProgram(t *testing.T) {
	pkgs := listModule(t)
	const program = "cmd/sandbox-bridge"
	inside := map[string]bool{program: true}
	for _, d := range own(pkgs[program].Deps) {
		if d != "errdefs" && !strings.HasPrefix(d, "api/") {
			inside[d] = true
		}
	}
	if len(inside) < 2 {
		t.Fatalf("the program's packages: %v", inside)
	}
	for path, p := range pkgs {
		if inside[path] {
			continue
		}
		for _, imp := range own(append(append(append([]string(nil), p.Imports...), p.TestImports...), p.XTestImports...)) {
			if inside[imp] {
				t.Errorf("%s imports the in-sandbox program (%s)", path, imp)
			}
		}
	}
}

// TestNoProductionCodeLinksTesting: no program, example or library package links
// package testing; only test support may.
func TestNoProductionCodeLinksTesting(t *testing.T) {
	checked := 0
	for path, p := range listModule(t) {
		if testSupport(path) {
			continue
		}
		checked++
		for _, d := range p.Deps {
			if d == "testing" {
				t.Errorf("%s links package testing", path)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d packages", checked)
	}
}
