package docker

import (
	"context"
	"fmt"
	"io"

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

// output is the session's output stream from the start of its log: Docker's attach
// (with the log replayed), or, for a paused container, which Docker refuses to
// attach to (409), its log followed (the same bytes, multiplexed the same way).
func (s *dockerSession) output(ctx context.Context) (io.ReadCloser, error) {
	if s.PauseState().Paused {
		return s.r.cfg.api.ContainerLogs(ctx, s.ID(), client.ContainerLogsOptions{Follow: true, ShowStdout: true, ShowStderr: true})
	}
	att, err := s.r.cfg.api.ContainerAttach(ctx, s.ID(), client.ContainerAttachOptions{Stream: true, Logs: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, err
	}
	return attached{att}, nil
}

type attached struct{ client.ContainerAttachResult }

func (a attached) Read(p []byte) (int, error) { return a.Reader.Read(p) }
func (a attached) Close() error               { a.ContainerAttachResult.Close(); return nil }
