package docker

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/port/porttest"
)

// needRuntime skips (fails when SANDBOX_REQUIRE names part) unless the daemon has the
// runtime registered (scripts/setup.sh registers runsc and crun when installed).
func needRuntime(t *testing.T, cli *client.Client, part, name string) {
	t.Helper()
	info, err := cli.Info(context.Background(), client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ok := info.Info.Runtimes[name]
	testenv.Need(t, part, ok, "the Docker daemon has no runtime "+name+" (scripts/setup.sh registers it in daemon.json)")
}

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
	lim, err := r.RunOnce(ctx, port.RunSpec{RunID: porttest.RunID("probe"), Image: image, Argv: []string{"/agent", "cat", "/proc/self/limits"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.RunOnce(ctx, port.RunSpec{RunID: porttest.RunID("probe"), Image: image, Argv: []string{"/agent", "caps"}})
	if err != nil {
		t.Fatal(err)
	}
	ok := lim.ExitCode == 0 && strings.Contains(string(st.Stdout), "NoNewPrivs:") && strings.Contains(string(st.Stdout), "CapAmb:")
	testenv.Need(t, "runsc-proc", ok, "runsc has no /proc/self/limits or no NoNewPrivs/CapAmb in /proc/self/status, which the suite reads (gVisor >= 2023 has them)")
	porttest.TestRunner(t, porttest.RunnerHarness{Runner: r, Image: image, Leftovers: drained(r, leftovers(cli))})
}

// TestRunscLockdown checks on gVisor, with probes its /proc answers, the lockdown the
// suite checks: a root that cannot be written, no effective capabilities, setuid(0)
// refused, the non-root user, loopback only with no route, and nothing left behind.
func TestRunscLockdown(t *testing.T) {
	cli, image := dockerEnv(t)
	needRuntime(t, cli, "runsc", "runsc")
	r, err := NewRunner(WithClient(cli), WithOwner("porttest-runsc"), WithBridge(testenv.Bridge(t)), WithRuntime("runsc"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(argv ...string) *port.RunResult {
		t.Helper()
		spec := port.RunSpec{RunID: porttest.RunID("runsc"), Image: image, Argv: append([]string{"/agent"}, argv...)}
		res, err := r.RunOnce(ctx, spec)
		if err != nil {
			t.Fatalf("%v: %+v", err, res)
		}
		if left, err := drained(r, leftovers(cli))(ctx, spec.RunID); err != nil || len(left) > 0 {
			t.Errorf("left behind: %v %v", left, err)
		}
		return res
	}
	if res := run("write", "/planted", "x"); res.ExitCode != 4 {
		t.Errorf("write to /: exit %d, %s", res.ExitCode, res.Stderr)
	}
	if res := run("caps"); !strings.Contains(string(res.Stdout), "CapEff:\t0000000000000000") && !strings.Contains(string(res.Stdout), "CapEff: 0000000000000000") {
		t.Errorf("caps: %s", res.Stdout)
	}
	if res := run("setuid0"); !strings.HasPrefix(string(res.Stdout), "setuid0 refused") {
		t.Errorf("setuid(0): %s", res.Stdout)
	}
	if res := run("id"); strings.TrimSpace(string(res.Stdout)) != "uid=1001 gid=1001" {
		t.Errorf("id: %s", res.Stdout)
	}
	if res := run("net"); strings.TrimSpace(string(res.Stdout)) != "iface lo\nroutes 0" {
		t.Errorf("network view: %q, want loopback only and no route", res.Stdout)
	}
}

func TestWithRuntimeValidates(t *testing.T) {
	for _, bad := range []string{"", "/usr/bin/runsc", "run sc"} {
		if _, err := NewRunner(WithRuntime(bad)); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("WithRuntime(%q): err = %v, want ErrInvalidSpec", bad, err)
		}
	}
	r, err := NewRunner(WithRuntime("crun"))
	if err != nil || r.Runtime() != "crun" {
		t.Errorf("WithRuntime(crun): %v, %q", err, r.Runtime())
	}
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
	porttest.TestRunner(t, porttest.RunnerHarness{Runner: r, Image: image, Leftovers: drained(r, leftovers(cli))})
}
