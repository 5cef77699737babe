package docker

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/port"
)

// classify maps an SDK error to the port sentinels, keeping the original as the cause.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case client.IsErrConnectionFailed(err), cerrdefs.IsUnavailable(err):
		return fmt.Errorf("%w: docker daemon (is it running, and is this the address? WithHost or DOCKER_HOST sets it; Runner.Ping checks it before any run): %w", port.ErrUnavailable, err)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %w", port.ErrNotFound, err)
	case cerrdefs.IsInvalidArgument(err):
		return fmt.Errorf("%w: %w", port.ErrInvalidSpec, err)
	default:
		return err
	}
}

func opErr(op, runID string, err error) error {
	if err == nil {
		return nil
	}
	return &port.OpError{Op: "docker." + op, RunID: runID, Err: err}
}
