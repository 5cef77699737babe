//go:build hostcond

// The conformance suite on runtimes this CI host cannot run it on: crun needs a cgroup
// layout other than this host's hybrid one, and Debian bookworm's gVisor (2022) lacks
// /proc/self/limits and the NoNewPrivs and CapAmb lines the suite reads. Run them on a
// host that has what they need:
//
//	go test -tags hostcond -run 'RunscConformance|CrunConformance' ./adapters/...
//
// TestRunscLockdown checks gVisor's lockdown in every run.

package docker

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestRunscConformance(t *testing.T) {
	cli, image := dockerEnv(t)
	needRuntime(t, cli, "runsc", "runsc")
	r, err := NewRunner(WithClient(cli), WithOwner("porttest-runsc"), WithBridge(testenv.Bridge(t)), WithRuntime("runsc"))
	if err != nil {
		t.Fatal(err)
	}
	// The suite reads /proc/self/limits and NoNewPrivs and CapAmb in /proc/self/status;
	// gVisor before 2023 (Debian bookworm's) has neither.
	ctx := context.Background()
	lim, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("probe"), Image: image, Argv: []string{"/agent", "cat", "/proc/self/limits"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("probe"), Image: image, Argv: []string{"/agent", "caps"}})
	if err != nil {
		t.Fatal(err)
	}
	ok := lim.ExitCode == 0 && strings.Contains(string(st.Stdout), "NoNewPrivs:") && strings.Contains(string(st.Stdout), "CapAmb:")
	testenv.Need(t, "runsc-proc", ok, "runsc has no /proc/self/limits or no NoNewPrivs/CapAmb in /proc/self/status, which the suite reads (gVisor >= 2023 has them)")
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: r, Image: image, Leftovers: drained(r, leftovers(cli))})
}

// TestCrunConformance needs crun registered and a cgroup layout crun can use: unified
// (cgroup v2 only) or legacy v1 without the v2 hierarchy at /sys/fs/cgroup/unified.
func TestCrunConformance(t *testing.T) {
	cli, image := dockerEnv(t)
	needRuntime(t, cli, "crun", "crun")
	_, unified := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	_, hybrid := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers")
	testenv.Need(t, "crun", unified == nil || hybrid != nil, "crun needs a cgroup v2 (unified) or pure v1 host; this one has the hybrid layout (v2 at /sys/fs/cgroup/unified)")
	r, err := NewRunner(WithClient(cli), WithOwner("porttest-crun"), WithBridge(testenv.Bridge(t)), WithRuntime("crun"))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: r, Image: image, Leftovers: drained(r, leftovers(cli))})
}
