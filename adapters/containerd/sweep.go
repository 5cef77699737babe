package containerd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/port"
)

// Sweep removes this runner's owner's containers (with their tasks and snapshots),
// stray snapshots and leases older than opts.OlderThan, optionally of one run only.
// Implements port.Sweeper.
func (r *Runner) Sweep(ctx context.Context, opts port.SweepOptions) (port.SweepReport, error) {
	var rep port.SweepReport
	if err := opts.Validate(); err != nil {
		return rep, opErr("Sweep", opts.RunID, err)
	}
	ctx = r.ns(ctx)
	filter := fmt.Sprintf(`labels.%q==%q`, port.LabelOwner, r.cfg.owner)
	if opts.RunID != "" {
		filter += fmt.Sprintf(`,labels.%q==%q`, port.LabelRunID, opts.RunID)
	}
	cutoff := time.Now().Add(-opts.OlderThan)
	// By creation time, or a session's last heartbeat, unless its host holds the lease.
	old := func(lbls map[string]string) bool { return session.Stale(r.sessionRoot(), r.cfg.owner, lbls, cutoff) }

	cs, err := r.cli.Containers(ctx, filter)
	if err != nil {
		return rep, opErr("Sweep", opts.RunID, classify(err))
	}
	live := map[string]bool{}
	for _, c := range cs {
		live[c.ID()] = true
		lbls, err := c.Labels(ctx)
		if err != nil || lbls[port.LabelOwner] != r.cfg.owner || !old(lbls) {
			continue
		}
		r.sweepContainer(ctx, c, lbls, opts.DryRun, &rep)
	}
	// Slot directories of pooled sandboxes whose container never came to be (a host
	// that died while creating one).
	if opts.RunID == "" {
		r.sweepSlotDirs(live, cutoff, opts.DryRun, &rep)
	}
	// Shims whose container is gone (a host that died while creating its task).
	if err := r.sweepShims(ctx, opts, cutoff, &rep); err != nil {
		return rep, opErr("Sweep", opts.RunID, err)
	}

	sn := r.cli.SnapshotService(r.cfg.snapshotter)
	var stray []string
	err = sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		// A container's own snapshot (keyed by its ID) goes with it: listed as the
		// container, it is not a stray (a dry run lists what the sweep removes).
		if info.Labels[port.LabelOwner] == r.cfg.owner && old(info.Labels) && !live[info.Name] {
			stray = append(stray, info.Name)
		}
		return nil
	}, filter)
	if err != nil {
		return rep, opErr("Sweep", opts.RunID, classify(err))
	}
	for _, name := range stray {
		rep.Removed = append(rep.Removed, "snapshot:"+name)
		if opts.DryRun {
			continue
		}
		if err := sn.Remove(ctx, name); err != nil && !errdefs.IsNotFound(err) {
			rep.Errors = append(rep.Errors, fmt.Errorf("snapshot %s: %w", name, err))
		}
	}

	ls, err := r.cli.LeasesService().List(ctx, filter)
	if err != nil {
		return rep, opErr("Sweep", opts.RunID, classify(err))
	}
	for _, l := range ls {
		if l.Labels[port.LabelOwner] != r.cfg.owner || l.CreatedAt.After(cutoff) {
			continue
		}
		rep.Removed = append(rep.Removed, "lease:"+l.ID)
		if opts.DryRun {
			continue
		}
		if err := r.cli.LeasesService().Delete(ctx, leases.Lease{ID: l.ID}); err != nil && !errdefs.IsNotFound(err) {
			rep.Errors = append(rep.Errors, fmt.Errorf("lease %s: %w", l.ID, err))
		}
	}
	// Leases of hosts that died.
	runner.SweepLeases(runlease.DefaultRoot(), r.cfg.owner, opts, &rep)
	r.cfg.logger.Info("sweep done", logattr.Owner, r.cfg.owner, "removed", len(rep.Removed), "errors", len(rep.Errors), "dry_run", opts.DryRun)
	return rep, nil
}

// sweepContainer removes one of our containers (with its task and snapshot), its
// stdio FIFO directories, and its session and slot directories, reporting them in
// rep (only reporting with dryRun).
func (r *Runner) sweepContainer(ctx context.Context, c client.Container, lbls map[string]string, dryRun bool, rep *port.SweepReport) {
	slotDir := r.slotDir(lbls[LabelSlotDir])
	if slotDir != "" {
		rep.Removed = append(rep.Removed, "dir:"+slotDir)
	}
	sessDir := session.OwnDir(r.sessionRoot(), lbls[port.LabelSessionDir])
	if sessDir != "" {
		rep.Removed = append(rep.Removed, "dir:"+sessDir)
	}
	rep.Removed = append(rep.Removed, "container:"+c.ID())
	fifos := fifoDirs(c.ID())
	for _, d := range fifos {
		rep.Removed = append(rep.Removed, "fifo:"+d)
	}
	if dryRun {
		return
	}
	if err := deleteContainer(ctx, c, false); err != nil {
		rep.Errors = append(rep.Errors, fmt.Errorf("container %s: %w", c.ID(), err))
		return
	}
	for _, d := range fifos {
		if err := os.RemoveAll(d); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("fifo directory %s: %w", d, err))
		}
	}
	if err := session.RemoveDir(r.sessionRoot(), sessDir); err != nil {
		rep.Errors = append(rep.Errors, fmt.Errorf("session directory %s: %w", sessDir, err))
	}
	if slotDir != "" {
		if err := removeSlotDir(slotDir); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("slot directory %s: %w", slotDir, err))
		}
	}
}

// sweepShims ends the owner's shims whose container is gone (orphanShims), made
// before cutoff and not under a live lease, with their stdio FIFO directories.
func (r *Runner) sweepShims(ctx context.Context, opts port.SweepOptions, cutoff time.Time, rep *port.SweepReport) error {
	orphans, err := r.orphanShims(ctx)
	if err != nil {
		return err
	}
	for _, s := range orphans {
		if (opts.RunID != "" && s.runID != opts.RunID) || s.made.After(cutoff) || runlease.Held(runlease.DefaultRoot(), r.cfg.owner, s.runID) {
			continue
		}
		rep.Removed = append(rep.Removed, "shim:"+s.id)
		fifos := fifoDirs(s.id)
		for _, d := range fifos {
			rep.Removed = append(rep.Removed, "fifo:"+d)
		}
		if opts.DryRun {
			continue
		}
		if err := endShim(ctx, s, r.cfg.address); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("shim of %s: %w", s.id, err))
		}
		for _, d := range fifos {
			if err := os.RemoveAll(d); err != nil {
				rep.Errors = append(rep.Errors, fmt.Errorf("fifo directory %s: %w", d, err))
			}
		}
	}
	return nil
}

// sweepSlotDirs removes the pool's slot directories older than cutoff whose
// container is not live (a host died while creating it).
func (r *Runner) sweepSlotDirs(live map[string]bool, cutoff time.Time, dryRun bool, rep *port.SweepReport) {
	ents, _ := os.ReadDir(r.poolDir())
	for _, e := range ents {
		d := filepath.Join(r.poolDir(), e.Name())
		fi, err := e.Info()
		if err != nil || live[e.Name()] || !e.IsDir() || fi.ModTime().After(cutoff) {
			continue
		}
		rep.Removed = append(rep.Removed, "dir:"+d)
		if dryRun {
			continue
		}
		if err := removeSlotDir(d); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("slot directory %s: %w", d, err))
		}
	}
}

// FIFORoot is where containerd's client creates a task's stdio FIFOs, one randomly
// named directory per task. A host that died mid-run leaves its directory behind;
// Sweep removes those of the containers it removes (the daemon is local: its socket
// is a unix socket).
const FIFORoot = "/run/containerd/fifo"

// fifoDirs lists the FIFO directories holding a container's stdio FIFOs
// (<FIFORoot>/<random>/<container id>-stdout and -stderr). Only directories whose
// every entry belongs to the container are returned.
func fifoDirs(containerID string) []string {
	matches, _ := filepath.Glob(filepath.Join(FIFORoot, "*", containerID+"-std*"))
	seen := map[string]bool{}
	var dirs []string
	for _, m := range matches {
		d := filepath.Dir(m)
		if seen[d] {
			continue
		}
		seen[d] = true
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		ours := true
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), containerID+"-") {
				ours = false
			}
		}
		if ours {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// slotDir returns a pooled sandbox's directory from its label, if it is one of this
// runner's ("" otherwise: a label never makes Sweep touch another path).
func (r *Runner) slotDir(label string) string {
	if label == "" || filepath.Dir(label) != r.poolDir() || !strings.HasPrefix(filepath.Base(label), "agentsandbox-pool-") {
		return ""
	}
	return label
}
