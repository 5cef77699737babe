//go:build linux

package slotmount

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// TestAttachPropagatesWithFlags: a run's directory attached at claim time on a slot's
// shared mount point reaches a slave copy of it (the sandbox's view) with its flags,
// by both ways of attaching, and on this kernel by the mount API of 5.12+.
func TestAttachPropagatesWithFlags(t *testing.T) {
	testenv.Need(t, "root", os.Getuid() == 0, "mounting needs root")
	for name, fn := range map[string]func(src, target, stage string, writable bool) error{
		"detached": func(src, target, _ string, writable bool) error { return attachDetached(src, target, writable) },
		"staged":   attachStaged,
	} {
		for _, writable := range []bool{false, true} {
			dir := t.TempDir()
			src, point, view := filepath.Join(dir, "src"), filepath.Join(dir, "point"), filepath.Join(dir, "view")
			for _, d := range []string{src, point, view} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(src, "f"), []byte("run data"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := MakeShared(point); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = UnmountUnder(dir) })
			// The sandbox's view: a slave copy made before the claim, as rslave does.
			if err := unix.Mount(point, view, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("", view, "", unix.MS_SLAVE, ""); err != nil {
				t.Fatal(err)
			}
			if err := fn(src, point, filepath.Join(dir, "stage"), writable); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if b, err := os.ReadFile(filepath.Join(view, "f")); err != nil || string(b) != "run data" {
				t.Errorf("%s: the view does not see the attached directory: %q %v", name, b, err)
			}
			opts := mountOptions(t, view)
			for _, want := range []string{"nosuid", "nodev"} {
				if !strings.Contains(","+opts+",", ","+want+",") {
					t.Errorf("%s writable=%v: view mounted %q, want %s", name, writable, opts, want)
				}
			}
			if ro := strings.HasPrefix(opts, "ro,") || opts == "ro"; ro == writable {
				t.Errorf("%s writable=%v: view mounted %q", name, writable, opts)
			}
			if _, err := os.Stat(filepath.Join(dir, "stage")); !os.IsNotExist(err) {
				t.Errorf("%s: the staging directory is left: %v", name, err)
			}
		}
	}
	if NoNewMountAPI.Load() {
		t.Error("this kernel refused the mount API of 5.12+; claims take the staged way")
	}
}

// mountOptions returns the per-mount options of the topmost mount at p.
func mountOptions(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var opts string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 5 && UnescapeMountinfo(fs[4]) == p {
			opts = fs[5]
		}
	}
	if opts == "" {
		t.Fatalf("nothing mounted at %s", p)
	}
	return opts
}
