package runner

import (
	"fmt"

	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/port"
)

// SweepLeases adds to rep owner's run leases under root whose holder is gone (of
// opts.RunID only, when set) and, unless opts.DryRun, removes exactly those: a dry
// run lists what the sweep after it removes (unless a holder comes back meanwhile).
// Entries are "runlease:<owner>/<run id>/<holder>".
func SweepLeases(root, owner string, opts port.SweepOptions, rep *port.SweepReport) {
	ls, err := runlease.List(root, owner)
	if err != nil {
		rep.Errors = append(rep.Errors, fmt.Errorf("run leases: %w", err))
		return
	}
	for _, l := range ls {
		if l.Held || (opts.RunID != "" && l.RunID != opts.RunID) {
			continue
		}
		rep.Removed = append(rep.Removed, "runlease:"+owner+"/"+l.RunID+"/"+l.Holder)
		if opts.DryRun {
			continue
		}
		if err := runlease.RemoveDeadHolder(root, l); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("run lease %s/%s: %w", l.RunID, l.Holder, err))
		}
	}
}
