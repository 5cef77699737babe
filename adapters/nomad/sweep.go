package nomad

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/port"
)

// Sweep purges the jobs of this runner's owner (found by their meta) older than
// opts.OlderThan, optionally only those of one run, with their allocations and proxy
// variables; also proxy variables whose job is gone. Only jobs whose meta names this
// owner are ever touched. A job with an allocation on a node the servers lost is
// stopped but kept (its sandbox may still run there; Nomad stops it when the node
// returns) and reported in Errors as ErrNodeLost, for a later Sweep. Implements
// port.Sweeper.
func (r *Runner) Sweep(ctx context.Context, opts port.SweepOptions) (port.SweepReport, error) {
	var rep port.SweepReport
	if err := opts.Validate(); err != nil {
		return rep, opErr("Sweep", opts.RunID, err)
	}
	prefix := jobPrefix
	if opts.RunID != "" {
		prefix += opts.RunID + "-"
	}
	cutoff := time.Now().Add(-opts.OlderThan)
	jobs, _, err := r.api.Jobs().ListOptions(withMeta, (&api.QueryOptions{Prefix: prefix}).WithContext(ctx))
	if err != nil {
		return rep, opErr("Sweep", opts.RunID, classify(err))
	}
	ours := map[string]bool{}
	for _, j := range jobs {
		if !r.ours(j.Meta, opts.RunID) {
			continue
		}
		ours[j.ID] = true
		if !old(j.Meta, cutoff) {
			continue
		}
		rep.Removed = append(rep.Removed, "job:"+j.ID)
		if opts.DryRun {
			continue
		}
		if err := r.remove(ctx, j.ID, nil, true); err != nil {
			rep.Errors = append(rep.Errors, err)
			if errors.Is(err, ErrNodeLost) {
				// Kept: its sandbox may run on a node that is gone for now.
				rep.Removed = rep.Removed[:len(rep.Removed)-1]
			}
		}
	}
	// A variable outlives its job only when a host died between writing it and
	// submitting the job, or during cleanup: its job id names the run.
	vars, _, err := r.api.Variables().PrefixList("nomad/jobs/"+prefix, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return rep, opErr("Sweep", opts.RunID, classify(err))
	}
	for _, v := range vars {
		job := strings.TrimPrefix(v.Path, "nomad/jobs/")
		job, _, _ = strings.Cut(job, "/")
		if ours[job] || time.Unix(0, v.CreateTime).After(cutoff) {
			continue
		}
		full, _, err := r.api.Variables().Read(v.Path, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil || full.Items["owner"] != r.cfg.owner || (opts.RunID != "" && full.Items["run_id"] != opts.RunID) {
			continue
		}
		rep.Removed = append(rep.Removed, "variable:"+v.Path)
		if opts.DryRun {
			continue
		}
		if _, err := r.api.Variables().Delete(v.Path, (&api.WriteOptions{}).WithContext(ctx)); err != nil && !isNotFound(err) {
			rep.Errors = append(rep.Errors, fmt.Errorf("variable %s: %w", v.Path, err))
		}
	}
	r.cfg.logger.Info("sweep done", "owner", r.cfg.owner, "removed", len(rep.Removed), "errors", len(rep.Errors), "dry_run", opts.DryRun)
	return rep, nil
}

func (r *Runner) ours(meta map[string]string, runID string) bool {
	return meta[port.LabelOwner] == r.cfg.owner && (runID == "" || meta[port.LabelRunID] == runID)
}

// old reports whether a job was created before cutoff; a job with our owner but no
// readable time is ours and broken: it is swept.
func old(meta map[string]string, cutoff time.Time) bool {
	t, err := time.Parse(time.RFC3339Nano, meta[port.LabelCreatedAt])
	return err != nil || !t.After(cutoff)
}

// withMeta asks job listings for the jobs' meta (left out by default).
var withMeta = &api.JobListOptions{Fields: &api.JobListFields{Meta: true}}
