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
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

func writeTree(t testing.TB, root string, files map[string]string) {
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

// TestNodeCachedInstall: with a lockfile, the second build of the same dependencies
// takes them from the cache (npm is not run: here it would fail) and gives the same
// image; another lockfile misses the cache; no lockfile, no cache. Needs npm and the
// npm registry.
func TestNodeCachedInstall(t *testing.T) {
	node, err := exec.LookPath("node")
	testenv.Need(t, "openclaw", err == nil, "node is not installed")
	npm := testenv.NeedCommand(t, "openclaw", "npm")
	app := t.TempDir()
	writeTree(t, app, map[string]string{
		"package.json": `{"name":"cached-app","private":true,"dependencies":{"is-number":"7.0.0"}}`,
		"agent.js":     `console.log(require('is-number')(5))`,
	})
	lock := exec.Command(npm, "install", "--package-lock-only", "--no-audit", "--no-fund", "--loglevel=error")
	lock.Dir = app
	if out, err := lock.CombinedOutput(); err != nil {
		t.Fatalf("npm install --package-lock-only: %v\n%s", err, out)
	}
	cache := filepath.Join(t.TempDir(), "npm")
	build := func(npmCmd string) (string, error) {
		img, err := Node(context.Background(), NodeApp{Name: "example.com/cached", Dir: app, Entry: "agent.js", Node: node, NPM: npmCmd, CacheDir: cache})
		if err != nil {
			return "", err
		}
		return img.Ref()
	}
	first, err := build(npm)
	if err != nil {
		t.Fatal(err)
	}
	second, err := build("/bin/false")
	if err != nil {
		t.Fatalf("a second build with the same lockfile ran npm: %v", err)
	}
	if first != second {
		t.Errorf("the cached build gave %s, the first %s", second, first)
	}
	ents, _ := os.ReadDir(cache)
	if len(ents) != 1 {
		t.Errorf("cache holds %d entries, want 1", len(ents))
	}
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("cache mode: %v %v", fi.Mode(), err)
	}
	// Another lockfile (and package.json) is another install.
	writeTree(t, app, map[string]string{"package.json": `{"name":"cached-app","private":true,"dependencies":{"is-number":"7.0.0"},"description":"changed"}`})
	if _, err := build("/bin/false"); err == nil {
		t.Error("a changed package.json was served from the cache")
	}
	// A cache another user could write is refused.
	if err := os.Chmod(cache, 0o777); err != nil {
		t.Fatal(err)
	}
	writeTree(t, app, map[string]string{"package.json": `{"name":"cached-app","private":true,"dependencies":{"is-number":"7.0.0"}}`})
	if _, err := build("/bin/false"); err == nil || !strings.Contains(err.Error(), "only this user") {
		t.Errorf("a world-writable cache: %v", err)
	}
	// Without a lockfile nothing is cached.
	if err := os.Chmod(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(app, "package-lock.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := build("/bin/false"); err == nil {
		t.Error("an app without a lockfile was served from the cache")
	}
}

// BenchmarkNodeBuild times agentimage.Node for an agent depending on openai and
// @anthropic-ai/sdk (pinned by a lockfile): the first build (npm ci from the npm
// registry; npm's own download cache warm) and a second one with the same
// dependencies (from agentimage's cache). Needs npm and the npm registry.
func BenchmarkNodeBuild(b *testing.B) {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("node is not installed")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		b.Skip("npm is not installed")
	}
	app := b.TempDir()
	writeTree(b, app, map[string]string{
		"package.json": `{"name":"bench-agent","private":true,"dependencies":{"openai":"7.57.0","@anthropic-ai/sdk":"1.12.0"}}`,
		"agent.mjs":    `import OpenAI from 'openai'; import Anthropic from '@anthropic-ai/sdk'; console.log(typeof OpenAI, typeof Anthropic)`,
	})
	lock := exec.Command(npm, "install", "--package-lock-only", "--no-audit", "--no-fund", "--loglevel=error")
	lock.Dir = app
	if out, err := lock.CombinedOutput(); err != nil {
		b.Fatalf("npm install --package-lock-only: %v\n%s", err, out)
	}
	build := func(b *testing.B, cache string) {
		img, err := Node(context.Background(), NodeApp{Name: "example.com/bench", Dir: app, Entry: "agent.mjs", Node: node, CacheDir: cache})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := img.Ref(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			cache := filepath.Join(b.TempDir(), "npm")
			b.StartTimer()
			build(b, cache)
		}
	})
	b.Run("cached", func(b *testing.B) {
		cache := filepath.Join(b.TempDir(), "npm")
		build(b, cache)
		for b.Loop() {
			build(b, cache)
		}
	})
}
