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

func (f freezer) Freeze(ctx context.Context) error { return f.do(ctx, client.Task.Pause) }

func (f freezer) Thaw(ctx context.Context) error { return f.do(ctx, client.Task.Resume) }

// do applies op (the task's Pause or Resume) to the session's task.
func (f freezer) do(ctx context.Context, op func(client.Task, context.Context) error) error {
	f.s.mu.Lock()
	t := f.s.task
	f.s.mu.Unlock()
	if t == nil {
		return fmt.Errorf("%w: the session has no task", port.ErrClosed)
	}
	if err := op(t, f.s.r.ns(ctx)); err != nil {
		return classify(err)
	}
	return nil
}

// taskPaused reports whether the task is paused (for a handle rebuilt by Attach).
func taskPaused(ctx context.Context, t client.Task) bool {
	st, err := t.Status(ctx)
	return err == nil && (st.Status == client.Paused || st.Status == client.Pausing)
}

var _ session.Freezer = freezer{}
