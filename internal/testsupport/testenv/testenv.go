// Package testenv decides whether a test that needs a real external part (a Docker
// engine, containerd, nginx, OpenClaw) runs, skips, or fails.
//
// Locally, a missing part skips the test with a message naming it. When the environment
// variable SANDBOX_REQUIRE lists the part (comma-separated, or "all"), as the project's
// CI does, a missing part fails the test instead: in CI nothing may skip.
package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/bridge"
)

// Required reports whether part must be present (SANDBOX_REQUIRE names it or "all").
func Required(part string) bool {
	for _, p := range strings.Split(os.Getenv("SANDBOX_REQUIRE"), ",") {
		p = strings.TrimSpace(p)
		if p == "all" || p == part {
			return true
		}
	}
	return false
}

// Need skips t (or fails it, when part is required) unless available is true.
// reason says what is missing and how to get it.
func Need(t testing.TB, part string, available bool, reason string) {
	t.Helper()
	if available {
		return
	}
	if Required(part) {
		t.Fatalf("%s is required (SANDBOX_REQUIRE=%s) but unavailable: %s", part, os.Getenv("SANDBOX_REQUIRE"), reason)
	}
	t.Skipf("skipping: %s unavailable: %s (run the README's test command to install it)", part, reason)
}

// NeedCommand is Need for a program on PATH; it returns the program's path.
func NeedCommand(t testing.TB, part, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	Need(t, part, err == nil, name+" not found on PATH")
	return p
}

// BusyCPUs keeps every CPU of the machine busy from another process until the test
// ends, so a test can prove that a property does not depend on timing. It uses sh.
func BusyCPUs(t testing.TB) {
	t.Helper()
	for i := 0; i < runtime.NumCPU(); i++ {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting a CPU load: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// Count returns the integer in the environment variable name, or def when it is unset
// or not a positive integer. Stress tests use it to run longer on request.
func Count(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

var bridgeBin struct {
	once sync.Once
	path string
	err  error
}

// UntimedContext is the context for what a test waits on but does not measure: building
// a program it runs, or a local cluster another package holds (their lock). It ends at
// the test binary's deadline (go test -timeout), or after 30 minutes where the test has
// none. A build from an empty Go cache on a loaded 2-core machine took over 3 minutes,
// the fixed limit it had; on a new machine one package's cluster tests held the
// Kubernetes lock for 11 minutes, past another's 10-minute budget.
func UntimedContext(t testing.TB) (context.Context, context.CancelFunc) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if at, ok := d.Deadline(); ok {
			return context.WithDeadline(context.Background(), at)
		}
	}
	return context.WithTimeout(context.Background(), 30*time.Minute)
}

// Bridge builds the sandbox bridge once per test binary and returns its path.
func Bridge(t testing.TB) string {
	t.Helper()
	bridgeBin.once.Do(func() {
		ctx, cancel := UntimedContext(t)
		defer cancel()
		bridgeBin.path, bridgeBin.err = bridge.Build(ctx, filepath.Join(os.TempDir(), "agentsandbox-bridge-test"))
	})
	if bridgeBin.err != nil {
		t.Fatalf("building the bridge: %v", bridgeBin.err)
	}
	return bridgeBin.path
}
