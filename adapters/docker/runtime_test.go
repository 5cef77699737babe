package docker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
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

// TestRunscConformance runs the runner conformance suite on gVisor (the runsc
// scripts/setup.sh builds and registers: Debian bookworm's 2022 release lacks
// /proc/self/limits and the NoNewPrivs and CapAmb lines the suite reads).
func TestRunscConformance(t *testing.T) {
	cli, image := dockerEnv(t)
	needRuntime(t, cli, "runsc", "runsc")
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("porttest-runsc")), WithBridge(testenv.Bridge(t)), WithRuntime("runsc"))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: r, Image: image, Leftovers: drained(r, leftovers(cli))})
}

// TestRunscLockdown checks on gVisor, with probes its /proc answers, the lockdown the
// suite checks: a root that cannot be written, no effective capabilities, setuid(0)
// refused, the non-root user, loopback only with no route, and nothing left behind.
func TestRunscLockdown(t *testing.T) {
	cli, image := dockerEnv(t)
	needRuntime(t, cli, "runsc", "runsc")
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("porttest-runsc")), WithBridge(testenv.Bridge(t)), WithRuntime("runsc"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(argv ...string) *port.RunResult {
		t.Helper()
		spec := port.RunSpec{RunID: sandboxtest.RunID("runsc"), Image: image, Argv: append([]string{"/agent"}, argv...)}
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
