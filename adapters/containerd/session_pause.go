package containerd

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/client"

	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/port"
)

var _ port.PausableSession = (*ctrSession)(nil)

// freezer is a containerd session's session.Freezer: the task's pause (the
// cgroup freezer, through the shim).
type freezer struct{ s *ctrSession }

func (f freezer) task() (client.Task, error) {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	if f.s.task == nil {
		return nil, fmt.Errorf("%w: the session has no task", port.ErrClosed)
	}
	return f.s.task, nil
}

func (f freezer) Freeze(ctx context.Context) error {
	t, err := f.task()
	if err != nil {
		return err
	}
	if err := t.Pause(f.s.r.ns(ctx)); err != nil {
		return classify(err)
	}
	return nil
}

func (f freezer) Thaw(ctx context.Context) error {
	t, err := f.task()
	if err != nil {
		return err
	}
	if err := t.Resume(f.s.r.ns(ctx)); err != nil {
		return classify(err)
	}
	return nil
}

// Pause implements port.PausableSession: the task's pause (the cgroup freezer).
func (s *ctrSession) Pause(ctx context.Context, opts port.PauseOptions) error {
	if err := s.PauseWith(ctx, freezer{s}, opts); err != nil {
		return opErr("Pause", s.RunID(), err)
	}
	return nil
}

// Resume implements port.PausableSession.
func (s *ctrSession) Resume(ctx context.Context) error {
	if err := s.ResumeWith(ctx, freezer{s}); err != nil {
		return opErr("Resume", s.RunID(), err)
	}
	return nil
}

// thawForStop thaws a paused session before Stop signals it: a frozen process
// cannot act on SIGTERM.
func (s *ctrSession) thawForStop(ctx context.Context) {
	tctx, cancel := s.r.cleanupCtx(ctx)
	defer cancel()
	if s.ThawForStop(tctx, freezer{s}) {
		s.r.cfg.logger.Debug("session: thawed to be stopped", "run_id", s.RunID())
	}
}

// taskPaused reports whether the task is paused (for a handle rebuilt by Attach).
func taskPaused(ctx context.Context, t client.Task) bool {
	st, err := t.Status(ctx)
	return err == nil && (st.Status == client.Paused || st.Status == client.Pausing)
}

var _ session.Freezer = freezer{}
