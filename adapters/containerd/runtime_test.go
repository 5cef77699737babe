package containerd

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// needRunsc returns the runsc wrapper scripts/setup.sh installs, or skips (fails when
// SANDBOX_REQUIRE names runsc) stating what the host lacks.
func needRunsc(t *testing.T) string {
	t.Helper()
	_, err := os.Stat(RuntimeRunscWrapper)
	testenv.Need(t, "runsc", err == nil, "gVisor: "+RuntimeRunscWrapper+" is missing (scripts/setup.sh installs it)")
	return RuntimeRunsc
}

// WithRuntime takes a runtime name, as on every adapter, and resolves it to the
// binary the runc shim runs; WithRuntimeBinary takes a path.
func TestWithRuntimeTakesNames(t *testing.T) {
	for _, bad := range []string{"", "bin/runsc", "run sc", "/usr/local/bin/runsc-sandbox"} {
		if _, err := NewRunner(WithRuntime(bad)); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("WithRuntime(%q): err = %v, want ErrInvalidSpec", bad, err)
		}
	}
	for _, bad := range []string{"", "runsc", "bin/runsc", "/opt/../x"} {
		if _, err := NewRunner(WithRuntimeBinary(bad)); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("WithRuntimeBinary(%q): err = %v, want ErrInvalidSpec", bad, err)
		}
	}
	for _, c := range []struct {
		opt          Option
		name, binary string
	}{
		{WithRuntime(RuntimeRunc), RuntimeRunc, ""},
		{WithRuntime(RuntimeRunsc), RuntimeRunsc, RuntimeRunscWrapper},
		{WithRuntime(RuntimeCrun), RuntimeCrun, RuntimeCrun},
		{WithRuntime("youki"), "youki", "youki"},
		{WithRuntimeBinary("/opt/bin/x"), "x", "/opt/bin/x"},
	} {
		r, err := NewRunner(c.opt)
		if err != nil || r.Runtime() != c.name || r.cfg.runtime != c.binary {
			t.Errorf("%s: %v, Runtime() = %q, binary %q", c.name, err, r.Runtime(), r.cfg.runtime)
		}
	}
}

// TestRunscConformance runs the runner conformance suite on gVisor (the runsc
// scripts/setup.sh builds: Debian bookworm's 2022 release lacks /proc/self/limits and
// the NoNewPrivs and CapAmb lines the suite reads).
func TestRunscConformance(t *testing.T) {
	r, image := runnerEnv(t, WithOwner(testenv.Owner("porttest-runsc")), WithBridge(testenv.Bridge(t)), WithRuntime(needRunsc(t)))
	if r.Runtime() != RuntimeRunsc {
		t.Fatalf("Runtime() = %q", r.Runtime())
	}
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: r, Image: image, Leftovers: leftovers(r)})
}

// TestRunscLockdown checks on gVisor, with probes its /proc answers, the lockdown the
// suite checks: a root that cannot be written, no effective capabilities, setuid(0)
// refused, the non-root user, loopback only with no route, and nothing left behind.
func TestRunscLockdown(t *testing.T) {
	r, image := runnerEnv(t, WithOwner(testenv.Owner("porttest-runsc")), WithBridge(testenv.Bridge(t)), WithRuntime(needRunsc(t)))
	ctx := context.Background()
	run := func(limits port.Limits, argv ...string) *port.RunResult {
		t.Helper()
		spec := port.RunSpec{RunID: sandboxtest.RunID("runsc"), Image: image, Argv: append([]string{"/agent"}, argv...), Limits: limits}
		res, err := r.RunOnce(ctx, spec)
		if err != nil {
			t.Fatalf("%v: %+v", err, res)
		}
		if left, err := leftovers(r)(ctx, spec.RunID); err != nil || len(left) > 0 {
			t.Errorf("left behind: %v %v", left, err)
		}
		return res
	}
	if res := run(port.Limits{}, "write", "/planted", "x"); res.ExitCode != 4 {
		t.Errorf("write to /: exit %d, %s", res.ExitCode, res.Stderr)
	}
	if res := run(port.Limits{}, "caps"); !strings.Contains(string(res.Stdout), "CapEff:\t0000000000000000") && !strings.Contains(string(res.Stdout), "CapEff: 0000000000000000") {
		t.Errorf("caps: %s", res.Stdout)
	}
	if res := run(port.Limits{}, "setuid0"); !strings.HasPrefix(string(res.Stdout), "setuid0 refused") {
		t.Errorf("setuid(0): %s", res.Stdout)
	}
	if res := run(port.Limits{}, "id"); strings.TrimSpace(string(res.Stdout)) != "uid=1001 gid=1001" {
		t.Errorf("id: %s", res.Stdout)
	}
	if res := run(port.Limits{}, "net"); strings.TrimSpace(string(res.Stdout)) != "iface lo\nroutes 0" {
		t.Errorf("network view: %q, want loopback only and no route", res.Stdout)
	}
}

// TestRunscPool: on gVisor a pool serves runs without host data (its sandboxes would
// not see the mounts attached at claim time), and refuses templates that need them.
func TestRunscPool(t *testing.T) {
	r, image := poolEnv(t, "pool-runsc", WithRuntime(needRunsc(t)))
	ctx := context.Background()
	spec := suiteSpec(image)
	for _, shape := range []func(*port.RunSpec){
		func(s *port.RunSpec) { s.WorkspaceDir = "/" },
		func(s *port.RunSpec) { s.LLM = &port.LLMSocket{HostDir: "/"} },
		func(s *port.RunSpec) { s.Mounts = []port.Mount{{Source: "/", Target: "/data"}} },
	} {
		s := spec
		shape(&s)
		if _, err := r.WarmPool(ctx, port.TemplateOf(s), port.PoolOptions{Size: 1}); !errors.Is(err, port.ErrUnsupported) {
			t.Errorf("a template with host data on runsc: err = %v, want ErrUnsupported", err)
		}
	}
	p, err := r.NewPool(ctx, port.TemplateOf(spec), port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	waitReady(t, p)
	spec.RunID = sandboxtest.RunID("pool-runsc")
	spec.Argv = []string{"/agent", "echo", "out", "err"}
	res, err := p.RunOnce(ctx, spec)
	if err != nil || string(res.Stdout) != "out" || string(res.Stderr) != "err" {
		t.Fatalf("%v: %+v", err, res)
	}
	if st := p.Stats(); st.Warm != 1 {
		t.Errorf("the run was not warm: %+v", st)
	}
	if left, err := leftovers(r)(ctx, spec.RunID); err != nil || len(left) > 0 {
		t.Errorf("left behind: %v %v", left, err)
	}
}
