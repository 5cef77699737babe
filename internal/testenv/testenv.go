// Package testenv decides whether a test that needs a real external part (a Docker
// engine, containerd, nginx, OpenClaw) runs, skips, or fails.
//
// Locally, a missing part skips the test with a message naming it. When the environment
// variable SANDBOX_REQUIRE lists the part (comma-separated, or "all"), as the project's
// CI does, a missing part fails the test instead: in CI nothing may skip.
package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
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
