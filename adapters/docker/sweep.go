package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/internal/runner/slotmount"
	"github.com/agentsandbox/sandbox/port"
)

// Sweep removes containers and volumes of this runner's owner that are older than
// opts.OlderThan (by their created-at label), optionally only those of one run. Only
// resources carrying the owner label are ever touched. Implements port.Sweeper.
//
// Pooled sandboxes are swept too, with their slot directories (unmounted first): a
// claimed one is found by run ID through its name (Docker's labels are fixed at
// creation), and without a run ID the slot directories whose sandbox is gone.
func (r *Runner) Sweep(ctx context.Context, opts port.SweepOptions) (port.SweepReport, error) {
	rep, err := sweep(ctx, r.cfg, opts)
	if err != nil {
		return rep, err
	}
	r.sweepPool(ctx, opts, &rep)
	return rep, nil
}

func sweep(ctx context.Context, cfg config, opts port.SweepOptions) (port.SweepReport, error) {
	var rep port.SweepReport
	if err := opts.Validate(); err != nil {
		return rep, opErr("Sweep", opts.RunID, err)
	}
	f := client.Filters{}.Add("label", port.LabelOwner+"="+cfg.owner)
	if opts.RunID != "" {
		f = f.Add("label", port.LabelRunID+"="+opts.RunID)
	}
	cutoff := time.Now().Add(-opts.OlderThan)
	// By creation time, or a session's last heartbeat, unless its host holds the
	// lease; a resource with our owner label but no readable time is ours and
	// broken: sweep it.
	old := func(lbls map[string]string) bool { return session.Stale(cfg.sessionDir(), cfg.owner, lbls, cutoff) }

	cs, err := cfg.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return rep, opErr("Sweep", opts.RunID, classify(err))
	}
	for _, c := range cs.Items {
		if c.Labels[port.LabelOwner] != cfg.owner || !old(c.Labels) {
			continue
		}
		// What goes with the container is listed with it, in a dry run too: a dry
		// run lists exactly what the sweep removes.
		rep.Removed = append(rep.Removed, "container:"+c.ID)
		sessDir, slotDir := session.OwnDir(cfg.sessionDir(), c.Labels[port.LabelSessionDir]), ownSlotDir(cfg, c.Labels)
		for _, d := range []string{sessDir, slotDir} {
			if d != "" {
				rep.Removed = append(rep.Removed, "dir:"+d)
			}
		}
		if opts.DryRun {
			continue
		}
		if _, err := cfg.api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !errors.Is(classify(err), port.ErrNotFound) {
			rep.Errors = append(rep.Errors, fmt.Errorf("container %s: %w", short(c.ID), classify(err)))
			continue
		}
		if err := session.RemoveDir(cfg.sessionDir(), sessDir); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("session directory %s: %w", sessDir, err))
		}
		if slotDir != "" {
			if err := slotmount.RemoveDir(slotDir); err != nil {
				rep.Errors = append(rep.Errors, fmt.Errorf("slot directory %s: %w", slotDir, err))
			}
		}
	}
	vs, err := cfg.api.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return rep, opErr("Sweep", opts.RunID, classify(err))
	}
	for _, v := range vs.Items {
		if v.Labels[port.LabelOwner] != cfg.owner || !old(v.Labels) {
			continue
		}
		rep.Removed = append(rep.Removed, "volume:"+v.Name)
		if opts.DryRun {
			continue
		}
		if _, err := cfg.api.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil && !errors.Is(classify(err), port.ErrNotFound) {
			rep.Errors = append(rep.Errors, fmt.Errorf("volume %s: %w", v.Name, classify(err)))
		}
	}
	// Leases of hosts that died.
	runner.SweepLeases(runlease.DefaultRoot(), cfg.owner, opts, &rep)
	cfg.logger.Info("sweep done", logattr.Owner, cfg.owner, "removed", len(rep.Removed), "errors", len(rep.Errors), "dry_run", opts.DryRun)
	return rep, nil
}

// loadOutput reads the daemon's answer to an image load: the names it loaded
// ("Loaded image: name:tag", "Loaded image ID: sha256:..."), or its error message.
func loadOutput(out []byte) (names []string, errMsg string) {
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err != nil {
			return names, ""
		}
		if m.ErrorDetail.Message != "" {
			return nil, m.ErrorDetail.Message
		}
		if m.Error != "" {
			return nil, m.Error
		}
		for line := range strings.Lines(m.Stream) {
			line = strings.TrimSpace(line)
			if name, ok := strings.CutPrefix(line, "Loaded image: "); ok {
				names = append(names, name)
			} else if id, ok := strings.CutPrefix(line, "Loaded image ID: "); ok {
				names = append(names, id)
			}
		}
	}
}
