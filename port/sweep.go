package port

import (
	"context"
	"time"
)

// Sweeper removes resources an adapter created and lost track of (the host process
// died, say). Only resources carrying the adapter's owner label are considered.
type Sweeper interface {
	Sweep(ctx context.Context, opts SweepOptions) (SweepReport, error)
}

// SweepOptions selects what a Sweep removes.
type SweepOptions struct {
	// OlderThan is a grace period: resources created less than this long ago are kept,
	// so a sweep never races a run that is just starting. Zero sweeps everything of ours.
	OlderThan time.Duration
	// RunID, if set, restricts the sweep to one run.
	RunID string
	// DryRun reports what would be removed without removing it.
	DryRun bool
}

// Validate checks o as every Sweep does before touching anything: a RunID, if set,
// must be valid (ValidateRunID) and OlderThan must not be negative. Errors wrap
// ErrInvalidSpec.
func (o SweepOptions) Validate() error {
	if o.RunID != "" {
		if err := ValidateRunID(o.RunID); err != nil {
			return err
		}
	}
	if o.OlderThan < 0 {
		return Invalidf("OlderThan is negative")
	}
	return nil
}

// SweepReport lists what a Sweep removed (or, with DryRun, would remove).
type SweepReport struct {
	// Removed names each resource as "kind:id", e.g. "container:3f2a…" or "volume:llm-sock-r1".
	Removed []string
	// Errors are per-resource failures; the sweep carries on past them.
	Errors []error
}
