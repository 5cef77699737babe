//go:build hostcond

// The conformance suite on crun, which this CI host cannot run: crun needs a cgroup
// layout other than this host's hybrid one (and, through containerd, a release newer
// than Debian bookworm's 1.8.1). Run it on a host that has what it needs:
//
//	go test -tags hostcond -run CrunConformance ./adapters/...
//
// gVisor's conformance (TestRunscConformance) runs in every run.

package containerd

import (
	"os"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestCrunConformance(t *testing.T) {
	needCrun(t)
	r, image := runnerEnv(t, WithOwner(testenv.Owner("porttest-crun")), WithBridge(testenv.Bridge(t)), WithRuntime(RuntimeCrun))
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: r, Image: image, Leftovers: leftovers(r)})
}

// needCrun skips (fails when required) unless crun is installed and the host's cgroup
// layout is one crun can use: unified (cgroup v2 only) or legacy (v1 without the v2
// hierarchy mounted at /sys/fs/cgroup/unified). On a hybrid host it fails to create
// tasks ("cgroups in hybrid mode not supported"). Debian bookworm's crun 1.8.1 also
// refuses, before that, the spec containerd's v2 client writes ("unknown version
// specified"): a newer crun is needed here as well.
func needCrun(t *testing.T) {
	t.Helper()
	testenv.NeedCommand(t, "crun", "crun")
	_, unified := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	_, hybrid := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers")
	testenv.Need(t, "crun", unified == nil || hybrid != nil, "crun needs a cgroup v2 (unified) or pure v1 host; this one has the hybrid layout (v2 at /sys/fs/cgroup/unified)")
}
