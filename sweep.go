package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentsandbox/sandbox/port"
)

// Sweep removes, in one call, what the hosts of one owner left behind when they died:
// it runs each sweeper with opts, in the order given, and returns one report per
// sweeper. Give it everything those hosts used, made with the same owner and
// directories: the runners (their sandboxes, sessions and their directories, pool
// slots and run leases), then the proxy managers (their per-run directories and
// sockets, nginx containers), then WorkspaceSweeper (the workspaces NewWorkspace made,
// with the prompts in them), last because the sandboxes mount them.
//
// Sweepers may overlap (two runners share the run leases, a Docker runner and the
// Docker proxy manager list the same containers): an entry is in the report of the
// first sweeper that names it only, so that a dry run (opts.DryRun) names each
// resource once and lists exactly what the sweep after it removes. A sweeper that
// fails as a whole (a daemon down) does not stop the others: its error is joined to
// the returned one, and its report is empty. Per-resource failures are in the
// reports' Errors.
func Sweep(ctx context.Context, opts port.SweepOptions, sweepers ...port.Sweeper) ([]port.SweepReport, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox: sweep: %w", err)
	}
	seen := map[string]bool{}
	reps := make([]port.SweepReport, 0, len(sweepers))
	var errs []error
	for i, sw := range sweepers {
		if err := ctx.Err(); err != nil {
			return reps, fmt.Errorf("sandbox: sweep: %w", err)
		}
		var rep port.SweepReport
		if sw == nil {
			errs = append(errs, fmt.Errorf("sweeper %d is nil", i))
			reps = append(reps, rep)
			continue
		}
		got, err := sw.Sweep(ctx, opts)
		if err != nil {
			errs = append(errs, err)
		}
		for _, x := range got.Removed {
			if !seen[x] {
				seen[x] = true
				rep.Removed = append(rep.Removed, x)
			}
		}
		rep.Errors = got.Errors
		reps = append(reps, rep)
	}
	if err := errors.Join(errs...); err != nil {
		return reps, fmt.Errorf("sandbox: sweep: %w", err)
	}
	return reps, nil
}

// WorkspaceSweeper is SweepWorkspaces as a port.Sweeper, for Sweep: the workspaces
// NewWorkspace made under parent (os.TempDir() when empty) for owner
// (port.DefaultOwner when empty).
func WorkspaceSweeper(parent, owner string) port.Sweeper {
	return workspaceSweeper{parent: parent, owner: owner}
}

type workspaceSweeper struct{ parent, owner string }

func (w workspaceSweeper) Sweep(ctx context.Context, opts port.SweepOptions) (port.SweepReport, error) {
	return SweepWorkspaces(ctx, w.parent, w.owner, opts)
}
