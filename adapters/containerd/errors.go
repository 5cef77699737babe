package containerd

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/port"
)

// classify maps a containerd error to the port sentinels, keeping it as the cause.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errdefs.IsUnavailable(err):
		return fmt.Errorf("%w: containerd: %w", port.ErrUnavailable, err)
	case errdefs.IsNotFound(err):
		return fmt.Errorf("%w: %w", port.ErrNotFound, err)
	default:
		return err
	}
}

func opErr(op, runID string, err error) error {
	if err == nil {
		return nil
	}
	return &port.OpError{Op: "containerd." + op, RunID: runID, Err: err}
}
