package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Environment of the child process of TestSweepAfterCrash.
const (
	crashEnv      = "AGENTSANDBOX_SANDBOXTEST_CRASH_RUN"
	crashImageEnv = "AGENTSANDBOX_SANDBOXTEST_CRASH_IMAGE"
)

// CrashHarness is what TestSweepAfterCrash needs.
type CrashHarness struct {
	// Sweeper is the adapter's sweeper, with the same owner as the child's runner.
	Sweeper port.Sweeper
	// Leftovers lists what the adapter holds for a run (see RunnerHarness).
	Leftovers func(ctx context.Context, runID string) ([]string, error)
	// Image is the probe agent image (ProbeImage), already available to the runner.
	Image string
}

// CrashChildMain must be called first thing in the TestMain of an adapter's tests that
// use TestSweepAfterCrash. In the child process that test starts, it makes a runner
// with newRunner and starts a run that never ends on its own: the parent kills the
// process mid-run, like a host that died. Anywhere else it returns at once.
func CrashChildMain(newRunner func() (port.SandboxRunner, error)) {
	runID := os.Getenv(crashEnv)
	if runID == "" {
		return
	}
	r, err := newRunner()
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	_, err = r.RunOnce(context.Background(), port.RunSpec{
		RunID: runID, Image: os.Getenv(crashImageEnv), Argv: []string{"/agent", "sleep", "600"},
		Limits: port.Limits{Timeout: 15 * time.Minute},
	})
	fmt.Fprintln(os.Stderr, "crash child: the run returned before the parent killed this process:", err)
	os.Exit(4)
}

// TestSweepAfterCrash kills a host process (a child test binary) in the middle of a
// run and proves that a later Sweep removes everything it left behind.
func TestSweepAfterCrash(t *testing.T, h CrashHarness) {
	runID := RunID("crash")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashEnv+"="+runID, crashImageEnv+"="+h.Image)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()

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
		case err := <-done:
			t.Fatalf("child exited before its sandbox existed: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the child's sandbox never appeared")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Let the sandbox get running, then kill the host process without warning.
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-done
	done <- nil // for the deferred receive

	left, err := h.Leftovers(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) == 0 {
		t.Fatal("killing the host process left nothing behind; the test proves nothing")
	}
	t.Logf("left behind by the crash: %v", left)
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
