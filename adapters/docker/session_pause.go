package docker

import (
	"context"
	"fmt"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/port"
)

var _ port.PausableSession = (*dockerSession)(nil)

// pauseAPI is the part of the SDK pausing sessions uses besides apiClient.
type pauseAPI interface {
	ContainerPause(ctx context.Context, containerID string, options client.ContainerPauseOptions) (client.ContainerPauseResult, error)
	ContainerUnpause(ctx context.Context, containerID string, options client.ContainerUnpauseOptions) (client.ContainerUnpauseResult, error)
}

// freezer is a Docker session's session.Freezer: Docker's pause (the cgroup
// freezer).
type freezer struct{ s *dockerSession }

func (f freezer) api() (pauseAPI, error) {
	p, ok := f.s.r.cfg.api.(pauseAPI)
	if !ok {
		return nil, fmt.Errorf("%w: the Docker client cannot pause", port.ErrUnsupported)
	}
	return p, nil
}

func (f freezer) Freeze(ctx context.Context) error {
	p, err := f.api()
	if err != nil {
		return err
	}
	if _, err := p.ContainerPause(ctx, f.s.ID(), client.ContainerPauseOptions{}); err != nil {
		return classify(err)
	}
	return nil
}

func (f freezer) Thaw(ctx context.Context) error {
	p, err := f.api()
	if err != nil {
		return err
	}
	if _, err := p.ContainerUnpause(ctx, f.s.ID(), client.ContainerUnpauseOptions{}); err != nil {
		return classify(err)
	}
	return nil
}

// Pause implements port.PausableSession: Docker's pause (the cgroup freezer).
func (s *dockerSession) Pause(ctx context.Context, opts port.PauseOptions) error {
	if err := s.PauseWith(ctx, freezer{s}, opts); err != nil {
		return opErr("Pause", s.RunID(), err)
	}
	return nil
}

// Resume implements port.PausableSession.
func (s *dockerSession) Resume(ctx context.Context) error {
	if err := s.ResumeWith(ctx, freezer{s}); err != nil {
		return opErr("Resume", s.RunID(), err)
	}
	return nil
}

// thawForStop thaws a paused session before Stop signals it: Docker refuses a
// SIGTERM to a paused container, and a frozen process could not act on it.
func (s *dockerSession) thawForStop(ctx context.Context) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.r.cfg.killGrace)
	defer cancel()
	if s.ThawForStop(tctx, freezer{s}) {
		s.r.cfg.logger.Debug("session: thawed to be stopped", "run_id", s.RunID())
	}
}

var _ session.Freezer = freezer{}
