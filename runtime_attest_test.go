package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

type runtimeRunner struct{ runtime string }

func (runtimeRunner) RunOnce(context.Context, port.RunSpec) (*port.RunResult, error) {
	return nil, port.ErrUnsupported
}
func (r runtimeRunner) Runtime() string { return r.runtime }

// TestAttestationRecordsTheHostsRuntime: the result's attestation carries the runtime
// the runner chose, never one the sandbox sent, and a kernel that does not match it is
// a violation.
func TestAttestationRecordsTheHostsRuntime(t *testing.T) {
	sent := &port.Attestation{Kernel: port.KernelLinux, Runtime: "runc"}
	got := withRuntime(sent, runtimeRunner{"/usr/local/bin/runsc-sandbox"})
	if got.Runtime != "/usr/local/bin/runsc-sandbox" || sent.Runtime != "runc" {
		t.Fatalf("recorded %q (the proxy's copy now %q)", got.Runtime, sent.Runtime)
	}
	if v := got.Violations(); !containsLine(v, "runtime") {
		t.Errorf("linux kernel under runsc: violations %v", v)
	}
	got = withRuntime(sent, struct{ port.SandboxRunner }{})
	if got.Runtime != "" {
		t.Errorf("a runner that does not say its runtime: recorded %q, want none", got.Runtime)
	}
	if withRuntime(nil, runtimeRunner{"runc"}) != nil {
		t.Error("no attestation became one")
	}
}

func containsLine(lines []string, word string) bool {
	for _, l := range lines {
		if strings.Contains(l, word) {
			return true
		}
	}
	return false
}
