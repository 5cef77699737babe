package bridge

import (
	"bytes"
	"context"
	"debug/elf"
	"github.com/agentsandbox/sandbox/internal/gobuild"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBuildIsStaticAndCached(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(bin) || filepath.Dir(bin) != dir {
		t.Errorf("binary %s is not an absolute path in %s", bin, dir)
	}
	fi, err := os.Stat(bin)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("binary mode: %v %v", fi, err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a program interpreter: it is not static")
		}
	}
	libs, _ := f.ImportedLibraries()
	if len(libs) > 0 {
		t.Errorf("the binary links %v", libs)
	}

	// A later call in the same process returns the same file at once.
	start := time.Now()
	again, err := Build(ctx, dir)
	if err != nil || again != bin || time.Since(start) > time.Second {
		t.Errorf("second call: %s, %v after %v", again, err, time.Since(start))
	}
	// Another process (here: the cache forgotten) finds the file by its content hash
	// instead of building it again; a rebuilt binary would have a new modification time.
	gobuild.ForgetCached()
	before, _ := os.ReadFile(bin)
	mt := fi.ModTime()
	third, err := Build(ctx, dir)
	if err != nil || third != bin {
		t.Fatalf("third call: %s, %v", third, err)
	}
	fi, _ = os.Stat(third)
	after, _ := os.ReadFile(third)
	if !fi.ModTime().Equal(mt) || !bytes.Equal(before, after) {
		t.Error("the binary was built again although its sources did not change")
	}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath=true", "GOOS=linux"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("build settings lack %s:\n%s", want, out)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the build directory holds %d entries, want the binary alone", len(entries))
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/nonexistent-cache")
	t.Setenv("HOME", "/nonexistent-home")
	if got := DefaultDir(); got != "/nonexistent-cache/agentsandbox/bridge" {
		t.Errorf("DefaultDir = %q", got)
	}
}
