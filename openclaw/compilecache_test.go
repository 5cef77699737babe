package openclaw

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

func TestCompileCacheBuild(t *testing.T) {
	root := filepath.Join(t.TempDir(), "cc")
	c, err := NewCompileCache(root, "2026.9.6")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Mount(); ok || c.Ready() {
		t.Fatal("a cache never built is ready")
	}
	calls := 0
	build := func(_ context.Context, m port.Mount) error {
		calls++
		if m.Target != CompileCacheTarget || !m.Writable {
			t.Errorf("build mount %+v", m)
		}
		if fi, err := os.Stat(m.Source); err != nil || fi.Mode().Perm() != 0o777 {
			t.Errorf("staging directory not open to the sandbox's user: %v %v", fi.Mode(), err)
		}
		d := filepath.Join(m.Source, "openclaw", "2026.9.6", "v24")
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(d, "e503edff"), []byte("code"), 0o644)
	}
	if err := c.Build(context.Background(), build); err != nil {
		t.Fatal(err)
	}
	m, ok := c.Mount()
	if !ok || m.Source != filepath.Join(root, "2026.9.6") || m.Target != CompileCacheTarget || m.Writable {
		t.Fatalf("mount %+v %v", m, ok)
	}
	f := filepath.Join(m.Source, "openclaw", "2026.9.6", "v24", "e503edff")
	if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("built entry not read-only: %v %v", fi, err)
	}
	if err := c.Build(context.Background(), build); err != nil || calls != 1 {
		t.Errorf("a built cache was built again: %v, %d calls", err, calls)
	}
	left, _ := filepath.Glob(filepath.Join(root, ".build-*"))
	if len(left) != 0 {
		t.Errorf("staging left: %v", left)
	}
}

// A build run that fails, writes nothing, or leaves a symlink (a cache is code later
// runs execute) builds nothing and leaves nothing.
func TestCompileCacheBadBuilds(t *testing.T) {
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(canary, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	for name, run := range map[string]func(context.Context, port.Mount) error{
		"fails": func(_ context.Context, m port.Mount) error {
			_ = os.WriteFile(filepath.Join(m.Source, "half"), []byte("x"), 0o644)
			return boom
		},
		"empty": func(_ context.Context, m port.Mount) error {
			return os.MkdirAll(filepath.Join(m.Source, "openclaw"), 0o755)
		},
		"symlink": func(_ context.Context, m port.Mount) error {
			_ = os.WriteFile(filepath.Join(m.Source, "ok"), []byte("x"), 0o644)
			return os.Symlink(canary, filepath.Join(m.Source, "link"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			c, _ := NewCompileCache(root, "2026.9.6")
			err := c.Build(context.Background(), run)
			if err == nil || c.Ready() {
				t.Fatalf("built: %v", err)
			}
			if name == "fails" && !errors.Is(err, boom) {
				t.Errorf("the run's error is lost: %v", err)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 0 {
				t.Errorf("left behind: %v", ents)
			}
			if b, err := os.ReadFile(canary); err != nil || string(b) != "host" {
				t.Errorf("the symlink's target was touched: %q %v", b, err)
			}
			if fi, _ := os.Stat(canary); fi.Mode().Perm() != 0o600 {
				t.Errorf("the symlink's target was chmodded: %v", fi.Mode())
			}
		})
	}
}

func TestNewCompileCacheInvalid(t *testing.T) {
	for _, tc := range [][2]string{{"rel/dir", "1.0"}, {"/abs", ""}, {"/abs", "../x"}, {"/abs", "a/b"}, {"/abs", ".."}} {
		if _, err := NewCompileCache(tc[0], tc[1]); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("NewCompileCache(%q, %q) = %v", tc[0], tc[1], err)
		}
	}
}

// OneShot.Apply mounts a built cache read-only, once; an unbuilt one adds nothing.
func TestOneShotApplyCompileCache(t *testing.T) {
	c, _ := NewCompileCache(t.TempDir(), "2026.9.6")
	o := OneShot{SessionID: "r1", CompileCache: c}
	spec := port.RunSpec{RunID: "r1", Image: "agent"}
	if err := o.Apply(&spec); err != nil || len(spec.Mounts) != 0 {
		t.Fatalf("unbuilt: %v %+v", err, spec.Mounts)
	}
	if err := os.MkdirAll(c.Dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := o.Apply(&spec); err != nil {
			t.Fatal(err)
		}
	}
	if len(spec.Mounts) != 1 || spec.Mounts[0] != (port.Mount{Source: c.Dir(), Target: CompileCacheTarget}) {
		t.Fatalf("mounts %+v", spec.Mounts)
	}
	if err := spec.WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
}
