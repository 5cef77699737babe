package sandbox

import (
	"context"
	"fmt"

	"github.com/agentsandbox/sandbox/port"
)

// Pause freezes the session's sandbox (the runtime's cgroup freezer; see
// port.PausableSession): it uses no CPU and keeps its memory, processes and files
// until Resume. Exec and Dial fail with an error wrapping port.ErrPaused meanwhile;
// ReadFile, WriteFile, Logs and Audit work.
//
// The session's proxy stays up while it is paused, holding its key and budget as
// before: nothing in the sandbox can start a call, and a call in flight when the
// sandbox froze completes at the upstream, its response waiting in the socket
// (the proxy has no write timeout) until the sandbox resumes and reads it; it is
// audited and counted as any other. The session's lifetime runs while it is paused
// unless opts.StopClock (then Resume moves the deadline by the time paused).
//
// Errors: port.ErrUnsupported for a runner whose sessions cannot pause (Kubernetes),
// port.ErrClosed once the session has ended, and the runtime's.
func (ss *Session) Pause(ctx context.Context, opts port.PauseOptions) error {
	p, err := ss.pausable()
	if err != nil {
		return err
	}
	if err := p.Pause(ctx, opts); err != nil {
		return fmt.Errorf("sandbox: session %s: %w", ss.req.RunID, err)
	}
	ss.log.Info("session paused", "stop_clock", opts.StopClock)
	return nil
}

// Resume thaws a paused session (a running one is left as is); see Pause.
func (ss *Session) Resume(ctx context.Context) error {
	p, err := ss.pausable()
	if err != nil {
		return err
	}
	if err := p.Resume(ctx); err != nil {
		return fmt.Errorf("sandbox: session %s: %w", ss.req.RunID, err)
	}
	ss.log.Info("session resumed", "deadline", p.PauseState().Deadline)
	return nil
}

// PauseState reports whether the session is paused, since when, and its deadline
// (the zero value for a runner whose sessions cannot pause).
func (ss *Session) PauseState() port.PauseState {
	if p, ok := ss.sess.(port.PausableSession); ok {
		return p.PauseState()
	}
	return port.PauseState{}
}

func (ss *Session) pausable() (port.PausableSession, error) {
	p, ok := ss.sess.(port.PausableSession)
	if !ok {
		return nil, fmt.Errorf("sandbox: session %s: %w: the runner's sessions cannot pause", ss.req.RunID, port.ErrUnsupported)
	}
	return p, nil
}
