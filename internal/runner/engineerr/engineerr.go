// Package engineerr classifies the errors of container engines (Docker, containerd),
// which both speak github.com/containerd/errdefs, into the port's sentinels: one
// table for every runner, so the same fault is the same sentinel on each.
package engineerr

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/port"
)

// Classify maps an engine error to the port sentinels, keeping the original as the
// cause: unavailable (or, where unavailable is given, what it reports, such as a
// client's connection failure) wraps port.ErrUnavailable naming engine; not found
// wraps port.ErrNotFound; invalid argument (a bad image reference, say) wraps
// port.ErrInvalidSpec. Context errors and anything else come back as they are.
func Classify(engine string, err error, unavailable func(error) bool) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case (unavailable != nil && unavailable(err)) || cerrdefs.IsUnavailable(err):
		return fmt.Errorf("%w: %s: %w", port.ErrUnavailable, engine, err)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %w", port.ErrNotFound, err)
	case cerrdefs.IsInvalidArgument(err):
		return fmt.Errorf("%w: %w", port.ErrInvalidSpec, err)
	default:
		return err
	}
}
