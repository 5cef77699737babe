package kubernetes

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/port"
)

// Sweep deletes the Pods of this runner's owner (found by the owner label in the
// runner's namespace) created more than opts.OlderThan ago, optionally only those of
// one run, and waits until each is gone; DryRun only reports. A session's Pod counts
// from its last heartbeat instead (a host holding a handle keeps it), and its session
// directory goes with it. Only Pods whose labels name this owner are ever touched.
// Implements port.Sweeper.
func (r *Runner) Sweep(ctx context.Context, opts port.SweepOptions) (port.SweepReport, error) {
	var rep port.SweepReport
	if err := opts.Validate(); err != nil {
		return rep, opErr("Sweep", opts.RunID, err)
	}
	sel := labels.Set{port.LabelOwner: r.cfg.owner}
	if opts.RunID != "" {
		sel[port.LabelRunID] = runLabel(opts.RunID)
	}
	list, err := r.cli.CoreV1().Pods(r.cfg.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return rep, opErr("Sweep", opts.RunID, classify(err))
	}
	cutoff := time.Now().Add(-opts.OlderThan)
	for _, p := range list.Items {
		if p.Labels[port.LabelOwner] != r.cfg.owner || (opts.RunID != "" && p.Annotations[annotationRun] != opts.RunID) {
			continue
		}
		if p.Labels[port.LabelKind] == port.KindSession {
			if session.Keep(r.sessionRoot(), podRecord(&p), cutoff) {
				continue
			}
		} else {
			created := p.CreationTimestamp.Time
			if t, err := time.Parse(time.RFC3339Nano, p.Annotations[annotationCreated]); err == nil && t.Before(created) {
				created = t
			}
			if created.After(cutoff) {
				continue
			}
		}
		rep.Removed = append(rep.Removed, "pod:"+p.Name)
		if opts.DryRun {
			continue
		}
		if err := r.remove(ctx, p.Name, false); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("pod %s: %w", p.Name, err))
			continue
		}
		if p.Labels[port.LabelKind] == port.KindSession {
			if err := session.RemoveDir(r.sessionRoot(), p.Annotations[port.LabelSessionDir]); err != nil {
				rep.Errors = append(rep.Errors, fmt.Errorf("pod %s: session directory: %w", p.Name, err))
			}
		}
	}
	return rep, nil
}
