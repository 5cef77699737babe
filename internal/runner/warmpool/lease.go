package warmpool

import (
	"fmt"

	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/port"
)

// HoldLease takes runID's lease of kind for owner in the machine's lease directory:
// a pool slot's own (runlease.KindSlot) from its creation, the claiming run's
// (runlease.KindRun) from the claim, both held until the slot is removed, so another
// process's Sweep of the owner leaves a live pool alone. One it cannot take is
// port.ErrInternal.
func HoldLease(owner, runID, kind string) (*runlease.Lease, error) {
	l, err := runlease.Hold(runlease.DefaultRoot(), owner, runID, kind)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", port.ErrInternal, err)
	}
	return l, nil
}
