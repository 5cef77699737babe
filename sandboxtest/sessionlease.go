package sandboxtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// SessionLeaseHarness is what TestSessionLease needs.
type SessionLeaseHarness struct {
	// Runner is the adapter under test; its owner is used by nothing but this test
	// (the test sweeps the whole owner).
	Runner port.SessionRunner
	// Other is a second instance of the adapter with the same owner: another
	// process's sweeper.
	Other port.Sweeper
	// Image is the probe agent image (ProbeImage), already available to Runner.
	Image string
	// Leftovers lists what the adapter holds for a run (see RunnerHarness).
	Leftovers func(ctx context.Context, runID string) ([]string, error)
	// Remove force-removes a run's sandbox from under it (see LeaseHarness).
	Remove func(ctx context.Context, runID string) error
}

// TestSessionLease proves that an open session handle holds a lease as a run does:
// another process's Sweep of the same owner with no grace at all leaves a live
// attached session (started or re-attached) alone; once the handle is detached the
// session has no lease and the heartbeat decides; and a session whose sandbox someone
// removes anyway ends with port.ErrRemoved, not as an agent that died (exit 137 and
// no error). About 10 s.
func TestSessionLease(t *testing.T, h SessionLeaseHarness) {
	if h.Runner == nil || h.Other == nil || h.Image == "" || h.Leftovers == nil || h.Remove == nil {
		t.Fatal("sandboxtest: SessionLeaseHarness needs Runner, Other, Image, Leftovers and Remove")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rig := &sessionLeaseRig{h: h, ctx: ctx}
	t.Run("SweepSparesAttachedSession", rig.sweepSparesAttached)
	t.Run("SweepSparesReattachedSession", rig.sweepSparesReattached)
	t.Run("RemovedUnderSessionIsTyped", rig.removedUnderSessionIsTyped)
}

// sessionLeaseRig is TestSessionLease's harness and deadline, shared by its subtests.
type sessionLeaseRig struct {
	h   SessionLeaseHarness
	ctx context.Context
}

// start starts a sleeping probe session, stopped and checked for leftovers at the
// test's end.
func (r *sessionLeaseRig) start(t *testing.T, name string) port.Session {
	t.Helper()
	s, err := r.h.Runner.Start(r.ctx, port.SessionSpec{RunSpec: port.RunSpec{
		RunID: RunID(name), Image: r.h.Image, Argv: []string{"/agent", "sleep", "600"},
		Limits: port.Limits{Timeout: 5 * time.Minute},
	}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		_, _ = s.Stop(context.Background(), time.Second)
		if left, err := r.h.Leftovers(context.Background(), s.RunID()); err != nil || len(left) > 0 {
			t.Errorf("session %s left behind: %v %v", s.RunID(), left, err)
		}
	})
	return s
}

// sweepAll sweeps the session's run and then the whole owner with no grace, and
// returns what they removed.
func (r *sessionLeaseRig) sweepAll(t *testing.T, runID string) []string {
	t.Helper()
	var removed []string
	for _, o := range []port.SweepOptions{{RunID: runID}, {}} {
		rep, err := r.h.Other.Sweep(r.ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		removed = append(removed, rep.Removed...)
	}
	return removed
}

func (r *sessionLeaseRig) alive(t *testing.T, s port.Session) {
	t.Helper()
	res, err := s.Exec(r.ctx, port.ExecSpec{Argv: []string{"/agent", "echo", "alive"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "alive" {
		t.Errorf("the session does not answer: %+v, %v", res, err)
	}
}

func (r *sessionLeaseRig) sweepSparesAttached(t *testing.T) {
	ctx := r.ctx
	s := r.start(t, "sess-leased")
	if removed := r.sweepAll(t, s.RunID()); len(removed) > 0 {
		t.Errorf("another process's Sweep with no grace removed a live attached session's %v", removed)
	}
	r.alive(t, s)
	select {
	case <-s.Done():
		res, err := s.Wait(ctx)
		t.Fatalf("the session ended: %+v, %v", res, err)
	default:
	}
	// Detached, the session has no lease: a sweep with no grace takes it.
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	if removed := r.sweepAll(t, s.RunID()); !removedSandbox(removed) {
		t.Errorf("a Sweep with no grace kept a detached session (its lease outlived the handle): %v", removed)
	}
	if left, err := r.h.Leftovers(ctx, s.RunID()); err != nil || len(left) > 0 {
		t.Errorf("after the sweep: %v %v", left, err)
	}
}

func (r *sessionLeaseRig) sweepSparesReattached(t *testing.T) {
	ctx := r.ctx
	s := r.start(t, "sess-reattached")
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	again, err := r.h.Runner.Attach(ctx, s.ID())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if removed := r.sweepAll(t, s.RunID()); len(removed) > 0 {
		t.Errorf("another process's Sweep with no grace removed a re-attached session's %v", removed)
	}
	r.alive(t, again)
	if _, err := again.Stop(ctx, time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

func (r *sessionLeaseRig) removedUnderSessionIsTyped(t *testing.T) {
	ctx := r.ctx
	s := r.start(t, "sess-removed")
	if err := r.h.Remove(ctx, s.RunID()); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := s.Wait(wctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("Wait did not return after the session's sandbox was removed")
	}
	if !errors.Is(err, port.ErrRemoved) {
		t.Errorf("a session whose sandbox was removed = %+v, %v; want port.ErrRemoved", res, err)
	}
	if _, err := r.h.Other.Sweep(ctx, port.SweepOptions{RunID: s.RunID()}); err != nil {
		t.Error(err)
	}
}
