package agentimage

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/errdefs"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A node_modules as npm lays it out: hoisted packages, one nested version conflict,
// a scoped package, an optional dependency that is absent, and packages the app does
// not need.
func fakeModules(t *testing.T) string {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"a/package.json":                      `{"name":"a","dependencies":{"b":"^2","@s/c":"1"},"optionalDependencies":{"gone":"1"}}`,
		"a/index.js":                          `module.exports = 1`,
		"a/node_modules/b/package.json":       `{"name":"b","version":"2.0.0"}`,
		"b/package.json":                      `{"name":"b","version":"1.0.0","dependencies":{"d":"1"}}`,
		"d/package.json":                      `{"name":"d"}`,
		"@s/c/package.json":                   `{"name":"@s/c","peerDependencies":{"b":"1","p":"1"},"peerDependenciesMeta":{"p":{"optional":true}}}`,
		"unused/package.json":                 `{"name":"unused"}`,
		"a/node_modules/unused2/package.json": `{"name":"unused2"}`,
	})
	return dir
}

func TestNodeClosure(t *testing.T) {
	dir := fakeModules(t)
	got, err := nodeClosure(dir, packageJSON{Name: "app", Dependencies: map[string]string{"a": "1", "b": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"@s/c", "a", "a/node_modules/b", "b", "d"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("closure %v, want %v", got, want)
	}
}

func TestNodeClosureMissing(t *testing.T) {
	dir := fakeModules(t)
	if err := os.RemoveAll(filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	_, err := nodeClosure(dir, packageJSON{Name: "app", Dependencies: map[string]string{"b": "1"}})
	var me *MissingDependencyError
	if !errors.As(err, &me) || !errors.Is(err, errdefs.ErrInvalidSpec) || me.Package != "d" || !reflect.DeepEqual(me.RequiredBy, []string{"app", "b"}) {
		t.Fatalf("got %v (%+v)", err, me)
	}
}

// TestNodeFromNodeModules packs only the closure of an app from a given node_modules,
// with the app's files but not its dot files.
func TestNodeFromNodeModules(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	app := t.TempDir()
	writeTree(t, app, map[string]string{
		"package.json":                   `{"name":"app","dependencies":{"a":"1"}}`,
		"agent.js":                       `require('a')`,
		"lib/util.js":                    `1`,
		".env":                           `SECRET=canary`,
		"node_modules/junk/package.json": `{}`,
	})
	img, err := Node(context.Background(), NodeApp{Name: "example.com/app", Dir: app, Entry: "agent.js", NodeModules: fakeModules(t), Node: node})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range img.Files {
		have[f.Path] = true
	}
	for _, p := range []string{NodeBin, "/app/agent.js", "/app/lib/util.js", "/app/package.json", "/app/node_modules/a/index.js",
		"/app/node_modules/a/node_modules/b/package.json", "/app/node_modules/@s/c/package.json", "/app/node_modules/d/package.json", "/etc/passwd", "/tmp"} {
		if !have[p] {
			t.Errorf("image lacks %s", p)
		}
	}
	for p := range have {
		if strings.Contains(p, "unused") || strings.Contains(p, "junk") || strings.HasSuffix(p, ".env") {
			t.Errorf("image has %s", p)
		}
	}
	if want := []string{NodeBin, "/app/agent.js"}; !reflect.DeepEqual(img.Entrypoint, want) {
		t.Errorf("entrypoint %v", img.Entrypoint)
	}
	if _, _, err := img.Archive(); err != nil {
		t.Fatal(err)
	}
	if _, err := Node(context.Background(), NodeApp{Name: "example.com/app", Dir: app, Entry: "../x.js", NodeModules: fakeModules(t), Node: node}); !errors.Is(err, errdefs.ErrInvalidSpec) {
		t.Errorf("entry outside the app: %v", err)
	}
}
