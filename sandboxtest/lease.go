package sandboxtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// LeaseHarness is what TestRunLease needs.
type LeaseHarness struct {
	// Runner is the adapter under test.
	Runner port.SandboxRunner
	// Other is a second instance of the adapter with the same owner: another
	// process's sweeper.
	Other port.Sweeper
	// Image is the probe agent image (ProbeImage), already available to Runner.
	Image string
	// Leftovers lists what the adapter holds for a run (see RunnerHarness).
	Leftovers func(ctx context.Context, runID string) ([]string, error)
	// Remove force-removes a run's sandbox from under it, as an operator (or a
	// sweeper that knows no leases) would.
	Remove func(ctx context.Context, runID string) error
}

// TestRunLease proves that a live run holds a lease: another sweeper of the same
// owner with no grace at all leaves it running to its normal end; and that a run
// whose sandbox someone removes anyway ends with port.ErrRemoved, not as an agent that
// died. About 8 s.
func TestRunLease(t *testing.T, h LeaseHarness) {
	if h.Runner == nil || h.Other == nil || h.Image == "" || h.Leftovers == nil || h.Remove == nil {
		t.Fatal("sandboxtest: LeaseHarness needs Runner, Other, Image, Leftovers and Remove")
	}
	type outcome struct {
		res *port.RunResult
		err error
	}
	start := func(ctx context.Context, name string, secs string) (string, <-chan outcome) {
		runID := RunID(name)
		done := make(chan outcome, 1)
		go func() {
			res, err := h.Runner.RunOnce(ctx, port.RunSpec{RunID: runID, Image: h.Image, Argv: []string{"/agent", "sleep", secs}, Limits: port.Limits{Timeout: 2 * time.Minute}})
			done <- outcome{res, err}
		}()
		for end := time.Now().Add(time.Minute); ; {
			left, err := h.Leftovers(ctx, runID)
			if err != nil {
				t.Fatal(err)
			}
			if containsPrefix(left, "container:") {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("run %s never got a sandbox", runID)
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second) // let it run
		return runID, done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("SweepSparesLiveRun", func(t *testing.T) {
		runID, done := start(ctx, "leased", "4")
		rep, err := h.Other.Sweep(ctx, port.SweepOptions{RunID: runID})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Removed) > 0 {
			t.Errorf("another process's Sweep removed a live run's %v", rep.Removed)
		}
		o := <-done
		if o.err != nil || o.res.ExitCode != 0 || strings.TrimSpace(string(o.res.Stdout)) != "slept" {
			t.Errorf("the live run = %+v, %v; want its normal end", o.res, o.err)
		}
		if left, err := h.Leftovers(ctx, runID); err != nil || len(left) > 0 {
			t.Errorf("left behind: %v %v", left, err)
		}
	})
	t.Run("RemovedUnderRunIsTyped", func(t *testing.T) {
		runID, done := start(ctx, "removed", "60")
		if err := h.Remove(ctx, runID); err != nil {
			t.Fatal(err)
		}
		var o outcome
		select {
		case o = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("RunOnce did not return after its sandbox was removed")
		}
		if !errors.Is(o.err, port.ErrRemoved) {
			t.Errorf("a run whose sandbox was removed = %+v, %v; want port.ErrRemoved", o.res, o.err)
		}
		if _, err := h.Other.Sweep(ctx, port.SweepOptions{RunID: runID}); err != nil {
			t.Error(err)
		}
		if left, err := h.Leftovers(ctx, runID); err != nil || len(left) > 0 {
			t.Errorf("left behind: %v %v", left, err)
		}
	})
}
