package gitcli

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Prune removes what the relay left in its cache directory older than olderThan: the
// scratch directories of exports and validations a crashed host never removed, and
// artefacts (bundles) the caller did not remove. Mirrors are kept. With dryRun it only
// reports. Entries newer than olderThan are kept, so Prune never races a running export.
func (r *Relay) Prune(ctx context.Context, olderThan time.Duration, dryRun bool) (port.SweepReport, error) {
	var rep port.SweepReport
	cutoff := time.Now().Add(-olderThan)
	for _, kind := range []string{"export", "quarantine", "artefacts"} {
		dir := filepath.Join(r.cfg.cacheDir, kind)
		ents, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return rep, &port.OpError{Op: "gitcli.Prune", Err: err}
		}
		for _, e := range ents {
			if ctx.Err() != nil {
				return rep, &port.OpError{Op: "gitcli.Prune", Err: ctx.Err()}
			}
			fi, err := e.Info()
			if err != nil || fi.ModTime().After(cutoff) {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if !dryRun {
				if err := os.RemoveAll(p); err != nil {
					rep.Errors = append(rep.Errors, err)
					continue
				}
			}
			rep.Removed = append(rep.Removed, kind+":"+e.Name())
		}
	}
	return rep, nil
}
