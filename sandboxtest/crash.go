package sandboxtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Environment of the child process of TestSweepAfterCrash.
const (
	crashEnv        = "AGENTSANDBOX_SANDBOXTEST_CRASH_RUN"
	crashImageEnv   = "AGENTSANDBOX_SANDBOXTEST_CRASH_IMAGE"
	crashBridgeEnv  = "AGENTSANDBOX_SANDBOXTEST_CRASH_BRIDGE"
	crashTimeoutEnv = "AGENTSANDBOX_SANDBOXTEST_CRASH_TIMEOUT"
)

// CrashHarness is what TestSweepAfterCrash needs.
type CrashHarness struct {
	// Sweeper is the adapter's sweeper, with the same owner as the child's runner.
	Sweeper port.Sweeper
	// Leftovers lists what the adapter holds for a run (see RunnerHarness).
	Leftovers func(ctx context.Context, runID string) ([]string, error)
	// Image is the probe agent image (ProbeImage), already available to the runner.
	Image string
	// Bridge is the host path of the sandbox bridge binary the child's runner uses
	// (TestDeadlineWithoutHost needs it: the bridge enforces the deadline inside).
	Bridge string
	// Running reports whether the run's sandbox is still running (for
	// TestDeadlineWithoutHost).
	Running func(ctx context.Context, runID string) (bool, error)
}

// CrashChildMain must be called first thing in the TestMain of an adapter's tests that
// use TestSweepAfterCrash or TestDeadlineWithoutHost. In the child process those tests
// start, it makes a runner with newRunner (given the harness's bridge path, possibly
// empty) and starts a run that would last 10 minutes: the parent kills the process
// mid-run, like a host that died. Anywhere else it returns at once.
func CrashChildMain(newRunner func(bridge string) (port.SandboxRunner, error)) {
	runID := os.Getenv(crashEnv)
	if runID == "" {
		return
	}
	r, err := newRunner(os.Getenv(crashBridgeEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	if spec := os.Getenv(poolHostEnv); spec != "" {
		poolHostMain(r, spec)
	}
	timeout, err := time.ParseDuration(os.Getenv(crashTimeoutEnv))
	if err != nil {
		timeout = 15 * time.Minute
	}
	_, err = r.RunOnce(context.Background(), port.RunSpec{
		RunID: runID, Image: os.Getenv(crashImageEnv), Argv: []string{"/agent", "sleep", "600"},
		Limits: port.Limits{Timeout: timeout},
	})
	fmt.Fprintln(os.Stderr, "crash child: the run returned before the parent killed this process:", err)
	os.Exit(4)
}

// TestSweepAfterCrash kills a host process (a child test binary) in the middle of a
// run and proves that a later Sweep removes everything it left behind.
func TestSweepAfterCrash(t *testing.T, h CrashHarness) {
	runID := RunID("crash")
	crashHost(t, h, runID, 15*time.Minute)
	ctx := context.Background()
	left, err := h.Leftovers(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) == 0 {
		t.Fatal("killing the host process left nothing behind; the test proves nothing")
	}
	t.Logf("left behind by the crash: %v", left)
	sweep(t, h, runID)
}

// TestDeadlineWithoutHost kills the host process (a child test binary) in the middle
// of a run with a 3 s time limit and requires the sandbox to stop by itself soon after
// the limit: the bridge inside enforces it when nobody outside can.
func TestDeadlineWithoutHost(t *testing.T, h CrashHarness) {
	if h.Running == nil || h.Bridge == "" {
		t.Fatal("CrashHarness.Running and Bridge are required")
	}
	const limit = 3 * time.Second
	runID := RunID("deadline")
	started := crashHost(t, h, runID, limit)
	defer sweep(t, h, runID)
	ctx := context.Background()
	// The bridge's deadline is limit+DeadlineSlack after the runner built the command,
	// then TERM, then KILL after the grace: all well within this bound.
	bound := started.Add(limit + 15*time.Second)
	for {
		running, err := h.Running(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if !running {
			t.Logf("the sandbox stopped %v after it was seen, with its host dead", time.Since(started).Round(100*time.Millisecond))
			return
		}
		if time.Now().After(bound) {
			t.Fatalf("the sandbox still runs %v after it was seen, with a %v limit and its host dead", time.Since(started), limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLeaseAcrossNamespaces runs the child host in its own PID namespace (unshare;
// it is pid 1 there) with a TMPDIR of its own (a private /tmp), as a host in a
// container or a systemd service with PrivateTmp runs: a Sweep of the whole owner
// from here, with no grace at all, must leave its live run (and whatever else it
// holds, a warm pool) alone, and once the host is killed take everything it left.
// About 10 s.
func TestLeaseAcrossNamespaces(t *testing.T, h CrashHarness) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is required")
	}
	runID := RunID("foreign")
	tmp, err := os.MkdirTemp("", "foreign-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	c := startHost(t, h, runID, 15*time.Minute, []string{"unshare", "--pid", "--fork", "--kill-child"}, []string{"TMPDIR=" + tmp})
	c.await(t, h, runID)
	time.Sleep(time.Second) // let it run
	ctx := context.Background()
	for _, o := range []port.SweepOptions{{RunID: runID}, {}} {
		rep, err := h.Sweeper.Sweep(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Removed) > 0 {
			t.Errorf("a Sweep (%+v) took %v of a live host in another PID namespace with another TMPDIR", o, rep.Removed)
		}
	}
	if left, err := h.Leftovers(ctx, runID); err != nil || len(left) == 0 {
		t.Fatalf("the live host's run has nothing left after the sweeps: %v %v", left, err)
	}
	c.kill()
	// The host is gone: its leases went with it, so the same sweep takes it all.
	rep, err := h.Sweeper.Sweep(ctx, port.SweepOptions{})
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("sweep after the host died: %v %v", err, rep.Errors)
	}
	if left, err := h.Leftovers(ctx, runID); err != nil || len(left) > 0 {
		t.Errorf("after the host died and a sweep: %v, %v", left, err)
	}
}

// crashHost starts a child host process running runID with the given limit, waits
// until its sandbox exists, and kills the child without warning. It returns when the
// sandbox was first seen.
func crashHost(t *testing.T, h CrashHarness, runID string, limit time.Duration) time.Time {
	t.Helper()
	c := startHost(t, h, runID, limit, nil, nil)
	defer c.kill()
	seen := c.await(t, h, runID)
	// Let the sandbox get running, then kill the host process without warning.
	time.Sleep(500 * time.Millisecond)
	c.kill()
	return seen
}

// host is a child host process (the test binary in CrashChildMain) running one run.
type host struct {
	cmd    *exec.Cmd
	stdout io.Reader
	done   chan error
	once   sync.Once
}

// startHost starts the child host running runID with the given limit, its command
// line behind prefix (unshare ...), with env added to its environment.
func startHost(t *testing.T, h CrashHarness, runID string, limit time.Duration, prefix, env []string) *host {
	t.Helper()
	argv := append(append([]string(nil), prefix...), os.Args[0], "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), crashEnv+"="+runID, crashImageEnv+"="+h.Image,
		crashBridgeEnv+"="+h.Bridge, crashTimeoutEnv+"="+limit.String()), env...)
	cmd.Stderr = os.Stderr
	// A group of its own: kill takes the host and whatever prefix ran it at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &host{cmd: cmd, stdout: out, done: make(chan error, 1)}
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(c.kill)
	return c
}

// kill kills the child and its process group without warning and waits until every
// process of the group is gone (once).
func (c *host) kill() {
	c.once.Do(func() {
		pg := -c.cmd.Process.Pid
		_ = syscall.Kill(pg, syscall.SIGKILL)
		<-c.done
		for end := time.Now().Add(10 * time.Second); syscall.Kill(pg, 0) == nil && time.Now().Before(end); {
			_ = syscall.Kill(pg, syscall.SIGKILL)
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// await waits until the child's run has a sandbox and returns when it was seen.
func (c *host) await(t *testing.T, h CrashHarness, runID string) time.Time {
	t.Helper()

	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left, err := h.Leftovers(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			break
		}
		select {
		case err := <-c.done:
			c.done <- err // for kill's receive
			t.Fatalf("child exited before its sandbox existed: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the child's sandbox never appeared")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Now()
}

// sweep removes what runID left and requires nothing to remain.
func sweep(t *testing.T, h CrashHarness, runID string) {
	t.Helper()
	ctx := context.Background()
	rep, err := h.Sweeper.Sweep(ctx, port.SweepOptions{RunID: runID})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) > 0 {
		t.Errorf("sweep errors: %v", rep.Errors)
	}
	if left, err := h.Leftovers(ctx, runID); err != nil || len(left) > 0 {
		t.Errorf("after the sweep: %v, %v", left, err)
	}
}
