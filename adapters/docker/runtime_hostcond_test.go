//go:build hostcond

// The conformance suite on crun, which this CI host cannot run: crun needs a cgroup
// layout other than this host's hybrid one. Run it on a host that has what it needs:
//
//	go test -tags hostcond -run CrunConformance ./adapters/...
//
// gVisor's conformance (TestRunscConformance) runs in every run.

package docker

import (
	"os"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestCrunConformance needs crun registered and a cgroup layout crun can use: unified
// (cgroup v2 only) or legacy v1 without the v2 hierarchy at /sys/fs/cgroup/unified.
func TestCrunConformance(t *testing.T) {
	cli, image := dockerEnv(t)
	needRuntime(t, cli, "crun", "crun")
	_, unified := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	_, hybrid := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers")
	testenv.Need(t, "crun", unified == nil || hybrid != nil, "crun needs a cgroup v2 (unified) or pure v1 host; this one has the hybrid layout (v2 at /sys/fs/cgroup/unified)")
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("porttest-crun")), WithBridge(testenv.Bridge(t)), WithRuntime("crun"))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: r, Image: image, Leftovers: drained(r, leftovers(cli))})
}
