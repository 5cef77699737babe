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
// freezer). Docker refuses a SIGTERM to a paused container: Stop thaws it first.
type freezer struct{ s *dockerSession }

func (f freezer) Freeze(ctx context.Context) error {
	return f.do(func(p pauseAPI) error {
		_, err := p.ContainerPause(ctx, f.s.ID(), client.ContainerPauseOptions{})
		return err
	})
}

func (f freezer) Thaw(ctx context.Context) error {
	return f.do(func(p pauseAPI) error {
		_, err := p.ContainerUnpause(ctx, f.s.ID(), client.ContainerUnpauseOptions{})
		return err
	})
}

// do calls op with the client's pause API, if it has one.
func (f freezer) do(op func(pauseAPI) error) error {
	p, ok := f.s.r.cfg.api.(pauseAPI)
	if !ok {
		return fmt.Errorf("%w: the Docker client cannot pause", port.ErrUnsupported)
	}
	if err := op(p); err != nil {
		return classify(err)
	}
	return nil
}

var _ session.Freezer = freezer{}
