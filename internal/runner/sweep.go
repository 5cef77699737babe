package runner

import (
	"fmt"

	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/port"
)

// SweepLeases adds to rep owner's run leases under root whose holder is gone (of
// opts.RunID only, when set) and, unless opts.DryRun, removes them: a dry run lists
// exactly the leases the sweep after it removes (unless a holder comes back
// meanwhile). Entries are "runlease:<owner>/<run id>".
func SweepLeases(root, owner string, opts port.SweepOptions, rep *port.SweepReport) {
	for _, id := range runlease.Dead(root, owner) {
		if opts.RunID != "" && id != opts.RunID {
			continue
		}
		rep.Removed = append(rep.Removed, "runlease:"+owner+"/"+id)
		if opts.DryRun {
			continue
		}
		if err := runlease.RemoveDead(root, owner, id); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("run lease %s: %w", id, err))
		}
	}
}
