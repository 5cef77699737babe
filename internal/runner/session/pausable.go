package session

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// Pausable is port.PausableSession's Pause and Resume for a session whose runtime
// freezes it through a Freezer, and the thaw Stop needs first: the same on every
// runtime that pauses. A runtime's session embeds it beside its Handle.
type Pausable struct {
	h       *Handle
	f       Freezer
	adapter string
	thaw    time.Duration
	log     *slog.Logger
}

// NewPausable returns the pause of the session h through f. Errors are in a
// *port.OpError of the adapter ("docker.Pause"); ThawBeforeStop waits at most thaw
// for the runtime and logs to log.
func NewPausable(h *Handle, f Freezer, adapter string, thaw time.Duration, log *slog.Logger) Pausable {
	return Pausable{h: h, f: f, adapter: adapter, thaw: thaw, log: log}
}

// Pause implements port.PausableSession (PauseWith).
func (p Pausable) Pause(ctx context.Context, opts port.PauseOptions) error {
	if err := p.h.PauseWith(ctx, p.f, opts); err != nil {
		return runner.OpErr(p.adapter+".Pause", p.h.RunID(), err)
	}
	return nil
}

// Resume implements port.PausableSession (ResumeWith).
func (p Pausable) Resume(ctx context.Context) error {
	if err := p.h.ResumeWith(ctx, p.f); err != nil {
		return runner.OpErr(p.adapter+".Resume", p.h.RunID(), err)
	}
	return nil
}

// ThawBeforeStop is a Stopper's Thaw: a paused session thawed (ThawForStop) before
// Stop signals it, even when ctx was cancelled, as long as the runtime answers
// within the thaw bound.
func (p Pausable) ThawBeforeStop(ctx context.Context) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.thaw)
	defer cancel()
	if p.h.ThawForStop(tctx, p.f) {
		p.log.Debug("session: thawed to be stopped", "run_id", p.h.RunID())
	}
}
