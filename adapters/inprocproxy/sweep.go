package inprocproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// liveProbeTimeout bounds the connect that tells a live proxy's socket from one left
// behind by a dead process.
const liveProbeTimeout = time.Second

// Sweep removes per-run directories (and their markers) of this manager's owner that a
// host process left behind, typically because it died before Stop. Implements
// port.Sweeper.
//
// A directory is removed when its marker says it belongs to this owner (and to
// opts.RunID, if set), it was created at least opts.OlderThan ago, this manager is not
// running its proxy, and its socket refuses connections: a socket that still accepts
// is served by a live process (perhaps another host process with the same owner) and is
// kept whatever its age. Removed entries are reported as "dir:<path>"; with DryRun
// nothing is removed. Errors wrap port.ErrInvalidSpec for bad options; per-directory
// failures are in the report and do not stop the sweep.
func (m *Manager) Sweep(ctx context.Context, opts port.SweepOptions) (port.SweepReport, error) {
	var rep port.SweepReport
	if err := opts.Validate(); err != nil {
		return rep, opErr("Sweep", opts.RunID, err)
	}
	od := m.ownerDir()
	entries, err := os.ReadDir(od)
	if errors.Is(err, os.ErrNotExist) {
		return rep, nil
	}
	if err != nil {
		return rep, opErr("Sweep", opts.RunID, internal("read %s: %w", od, err))
	}
	cutoff := time.Now().Add(-opts.OlderThan)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return rep, opErr("Sweep", opts.RunID, err)
		}
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || name == "" || strings.ContainsAny(name, `/\`) {
			continue
		}
		markerPath := filepath.Join(od, e.Name())
		runID, created, err := readMarker(markerPath, name, m.cfg.owner)
		if errors.Is(err, errNotOurs) {
			continue
		}
		if err != nil {
			// Ours by place and name but unreadable (a crash mid-write): judge by mtime.
			fi, serr := e.Info()
			if serr != nil {
				continue
			}
			created = fi.ModTime()
		}
		if opts.RunID != "" && runID != opts.RunID {
			continue
		}
		if created.After(cutoff) || m.isActive(name) {
			continue
		}
		dir := filepath.Join(od, name)
		if socketLive(ctx, filepath.Join(dir, port.LLMSocketName)) {
			m.cfg.logger.Info("inproc: sweep keeps a directory whose socket is served", slog.String("dir", dir))
			continue
		}
		rep.Removed = append(rep.Removed, "dir:"+dir)
		if opts.DryRun {
			continue
		}
		// The directory first, the marker last: an interrupted sweep leaves a marker
		// that the next sweep finds.
		if err := os.RemoveAll(dir); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("%s: %w", dir, err))
			continue
		}
		if err := os.Remove(markerPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			rep.Errors = append(rep.Errors, fmt.Errorf("%s: %w", markerPath, err))
		}
	}
	return rep, nil
}

// errNotOurs marks a well-formed marker that names another directory or owner.
var errNotOurs = errors.New("marker belongs elsewhere")

// readMarker returns the run id and creation time of a marker whose content matches its
// place (its directory name and owner).
func readMarker(path, name, owner string) (string, time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", time.Time{}, err
	}
	var mk marker
	if err := json.Unmarshal(b, &mk); err != nil {
		return "", time.Time{}, err
	}
	if mk.Dir != name || mk.Labels[port.LabelOwner] != owner {
		return "", time.Time{}, errNotOurs
	}
	t, err := time.Parse(time.RFC3339Nano, mk.Labels[port.LabelCreatedAt])
	if err != nil {
		return "", time.Time{}, err
	}
	return mk.Labels[port.LabelRunID], t, nil
}

// socketLive reports whether something accepts connections on the socket at path.
func socketLive(ctx context.Context, path string) bool {
	d := net.Dialer{Timeout: liveProbeTimeout}
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
