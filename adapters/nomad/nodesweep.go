package nomad

import (
	"context"
	"errors"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/hashicorp/nomad/api"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/port"
)

// NodeDocker is the part of a Docker client (github.com/moby/moby/client.Client)
// that SweepNode uses: the Docker engine of one client node.
type NodeDocker interface {
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerRemove(ctx context.Context, containerID string, options client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	VolumeList(ctx context.Context, options client.VolumeListOptions) (client.VolumeListResult, error)
	VolumeRemove(ctx context.Context, volumeID string, options client.VolumeRemoveOptions) (client.VolumeRemoveResult, error)
}

// labelAllocID is the label the docker driver puts on every container it creates:
// the allocation the container belongs to.
const labelAllocID = "com.hashicorp.nomad.alloc_id"

// SweepNode is the node-local half of Sweep, for a node the servers lost: the
// runner's Sweep reaches sandboxes only through Nomad, and a container left running
// on a node whose agent died (and whose job was later purged) is out of Nomad's
// reach. Run on (or against) that node's Docker engine, SweepNode removes the
// containers of this runner's owner (optionally of one run) older than
// opts.OlderThan whose allocation Nomad no longer runs: gone (its job purged),
// terminal (complete, failed or lost) or told to stop. A container whose allocation
// Nomad still runs is left alone, and so is one whose allocation cannot be read
// (reported in Errors): it never removes a live run. Containers without the docker
// driver's allocation label are not Nomad's (adapters/docker sweeps those). It also
// removes the owner's volumes (a copied workspace's tmpfs volume, labelled with the
// run) that no container uses any more: Docker removes them with their container,
// but not where the driver removed a container without its volumes (a failed
// start). A volume in use is never removed (Docker refuses).
func (r *Runner) SweepNode(ctx context.Context, docker NodeDocker, opts port.SweepOptions) (port.SweepReport, error) {
	var rep port.SweepReport
	if err := opts.Validate(); err != nil {
		return rep, opErr("SweepNode", opts.RunID, err)
	}
	if docker == nil {
		return rep, opErr("SweepNode", opts.RunID, port.Invalidf("no Docker client for the node"))
	}
	f := client.Filters{}.Add("label", port.LabelOwner+"="+r.cfg.owner).Add("label", labelAllocID)
	if opts.RunID != "" {
		f = f.Add("label", port.LabelRunID+"="+opts.RunID)
	}
	cs, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return rep, opErr("SweepNode", opts.RunID, fmt.Errorf("%w: docker: %w", port.ErrUnavailable, err))
	}
	cutoff := time.Now().Add(-opts.OlderThan)
	for _, c := range cs.Items {
		// The filter is the daemon's; the owner is checked here too.
		if !r.ours(c.Labels, opts.RunID) || !old(c.Labels, cutoff) {
			continue
		}
		orphan, err := r.allocEnded(ctx, c.Labels[labelAllocID])
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("container %.12s: %w", c.ID, err))
			continue
		}
		if !orphan {
			continue
		}
		rep.Removed = append(rep.Removed, "container:"+c.ID)
		if opts.DryRun {
			continue
		}
		if _, err := docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !isNotFound(err) {
			rep.Errors = append(rep.Errors, fmt.Errorf("container %.12s: %w", c.ID, err))
		}
	}
	vf := client.Filters{}.Add("label", port.LabelOwner+"="+r.cfg.owner)
	if opts.RunID != "" {
		vf = vf.Add("label", port.LabelRunID+"="+opts.RunID)
	}
	vs, err := docker.VolumeList(ctx, client.VolumeListOptions{Filters: vf})
	if err != nil {
		return rep, opErr("SweepNode", opts.RunID, fmt.Errorf("%w: docker: %w", port.ErrUnavailable, err))
	}
	for _, v := range vs.Items {
		if !r.ours(v.Labels, opts.RunID) || !old(v.Labels, cutoff) {
			continue
		}
		if opts.DryRun {
			rep.Removed = append(rep.Removed, "volume:"+v.Name)
			continue
		}
		_, err := docker.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{})
		switch {
		case err == nil:
			rep.Removed = append(rep.Removed, "volume:"+v.Name)
		case cerrdefs.IsConflict(err) || isNotFound(err):
			// In use by a container (a live run's, or one left for the loop above
			// to judge), or already gone.
		default:
			rep.Errors = append(rep.Errors, fmt.Errorf("volume %s: %w", v.Name, err))
		}
	}
	r.cfg.logger.Info("node sweep done", "owner", r.cfg.owner, "removed", len(rep.Removed), "errors", len(rep.Errors), "dry_run", opts.DryRun)
	return rep, nil
}

// allocEnded reports whether Nomad no longer runs allocation id: it is gone,
// terminal, or told to stop. An error means Nomad could not say.
func (r *Runner) allocEnded(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, errors.New("no allocation label")
	}
	a, _, err := r.api.Allocations().Info(id, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		if isNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("allocation %s: %w", id, classify(err))
	}
	return a.ServerTerminalStatus() || a.ClientTerminalStatus(), nil
}
