package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/internal/runner/slotmount"
	"github.com/agentsandbox/sandbox/port"
)

// ownSlotDir returns a slot directory label's value when it names a directory
// directly under this owner's pool directory, else "" (a label is not trusted to
// point anywhere else).
func ownSlotDir(cfg config, lbls map[string]string) string {
	d := lbls[LabelSlotDir]
	if d == "" || filepath.Dir(d) != cfg.poolRoot() || filepath.Base(d) == "." {
		return ""
	}
	return d
}

// sweepSlotDir removes the slot directory of a swept pooled sandbox.
func sweepSlotDir(cfg config, lbls map[string]string, rep *port.SweepReport) {
	d := ownSlotDir(cfg, lbls)
	if d == "" {
		return
	}
	rep.Removed = append(rep.Removed, "dir:"+d)
	if err := slotmount.RemoveDir(d); err != nil {
		rep.Errors = append(rep.Errors, fmt.Errorf("slot directory %s: %w", d, err))
	}
}

// poolRoot is Runner.poolDir for a config.
func (c config) poolRoot() string { return filepath.Join(c.poolDir, "docker", c.owner) }

// pooledContainers lists this owner's pooled sandboxes: all of them, or (runID set)
// those claimed by that run.
func (r *Runner) pooledContainers(ctx context.Context, runID string) ([]container.Summary, error) {
	f := client.Filters{}.Add("label", port.LabelOwner+"="+r.cfg.owner).Add("label", LabelPool)
	cs, err := r.cfg.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, classify(err)
	}
	var out []container.Summary
	for _, c := range cs.Items {
		if c.Labels[port.LabelOwner] != r.cfg.owner {
			continue
		}
		if runID == "" {
			out = append(out, c)
			continue
		}
		for _, n := range c.Names {
			if pooledRun(n, runID) {
				out = append(out, c)
				break
			}
		}
	}
	return out, nil
}

// sweepPool adds to a sweep what only the pool knows: the sandboxes claimed by
// opts.RunID (found by name), and, for a sweep of the whole owner, slot directories
// whose sandbox is gone (a host that died while creating one), older than the cutoff.
func (r *Runner) sweepPool(ctx context.Context, opts port.SweepOptions, rep *port.SweepReport) {
	if opts.RunID != "" {
		cs, err := r.pooledContainers(ctx, opts.RunID)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("pooled sandboxes: %w", err))
			return
		}
		if runlease.Held(runlease.DefaultRoot(), r.cfg.owner, opts.RunID) {
			return // the run's host is alive: its pooled sandbox is live
		}
		for _, c := range cs {
			rep.Removed = append(rep.Removed, "container:"+c.ID)
			if opts.DryRun {
				continue
			}
			if _, err := r.cfg.api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !errors.Is(classify(err), port.ErrNotFound) {
				rep.Errors = append(rep.Errors, fmt.Errorf("container %s: %w", short(c.ID), classify(err)))
				continue
			}
			sweepSlotDir(r.cfg, c.Labels, rep)
		}
		return
	}
	cs, err := r.pooledContainers(ctx, "")
	if err != nil {
		rep.Errors = append(rep.Errors, fmt.Errorf("pooled sandboxes: %w", err))
		return
	}
	live := map[string]bool{}
	for _, c := range cs {
		if d := ownSlotDir(r.cfg, c.Labels); d != "" {
			live[d] = true
		}
	}
	cutoff := time.Now().Add(-opts.OlderThan)
	ents, _ := os.ReadDir(r.poolDir())
	for _, e := range ents {
		d := filepath.Join(r.poolDir(), e.Name())
		fi, err := e.Info()
		if err != nil || live[d] || !e.IsDir() || fi.ModTime().After(cutoff) {
			continue
		}
		rep.Removed = append(rep.Removed, "dir:"+d)
		if opts.DryRun {
			continue
		}
		if err := slotmount.RemoveDir(d); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("slot directory %s: %w", d, err))
		}
	}
}
