package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// workspacePrefix starts the name of every private parent NewWorkspace makes.
const workspacePrefix = "agentsandbox-ws-"

// markerName is the marker file in a workspace's private parent (never in the
// workspace itself: the agent cannot reach it).
const markerName = ".agentsandbox-workspace.json"

// workspaceMarker is what a workspace's marker says.
type workspaceMarker struct {
	Owner   string    `json:"owner"`
	RunID   string    `json:"run_id,omitempty"`
	Created time.Time `json:"created"`
}

// WorkspaceOption configures NewWorkspace.
type WorkspaceOption func(*workspaceMarker) error

// WithWorkspaceOwner marks the workspace as owner's (default port.DefaultOwner), the
// owner SweepWorkspaces is given; use the owner the host gives its runners.
func WithWorkspaceOwner(owner string) WorkspaceOption {
	return func(m *workspaceMarker) error {
		if err := validateOwner(owner); err != nil {
			return err
		}
		m.Owner = owner
		return nil
	}
}

// WithWorkspaceRunID records the run the workspace is for, so SweepWorkspaces can
// remove one run's workspace (port.SweepOptions.RunID).
func WithWorkspaceRunID(runID string) WorkspaceOption {
	return func(m *workspaceMarker) error {
		if err := port.ValidateRunID(runID); err != nil {
			return err
		}
		m.RunID = runID
		return nil
	}
}

func writeMarker(holder string, m workspaceMarker) error {
	m.Created = time.Now().UTC()
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(holder, markerName), b, 0o600)
}

// readMarker reads the marker of a private parent without following links: the
// parent must be a real directory and the marker a regular file.
func readMarker(holder string) (workspaceMarker, error) {
	var m workspaceMarker
	fi, err := os.Lstat(holder)
	if err != nil {
		return m, err
	}
	if !fi.IsDir() {
		return m, fmt.Errorf("%s is not a directory", holder)
	}
	f, err := os.OpenFile(filepath.Join(holder, markerName), os.O_RDONLY|openNoFollow, 0)
	if err != nil {
		return m, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return m, fmt.Errorf("%s: marker is not a regular file", holder)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: marker: %v", holder, err)
	}
	return m, nil
}

// SweepWorkspaces removes the workspaces NewWorkspace made under parent
// (os.TempDir() when empty) for owner (port.DefaultOwner when empty) that a crashed or
// careless host left behind: those created at least opts.OlderThan ago (the grace
// period, so a sweep does not take a workspace from a run that is starting), of
// opts.RunID only when set. Directories without a marker of that owner are never
// touched. With opts.DryRun it only reports. Removed entries are "workspace:<dir>".
func SweepWorkspaces(ctx context.Context, parent, owner string, opts port.SweepOptions) (port.SweepReport, error) {
	var rep port.SweepReport
	if parent == "" {
		parent = os.TempDir()
	}
	if owner == "" {
		owner = port.DefaultOwner
	}
	if err := validateOwner(owner); err != nil {
		return rep, fmt.Errorf("sandbox: sweep workspaces: %w", err)
	}
	if opts.OlderThan < 0 {
		return rep, fmt.Errorf("sandbox: sweep workspaces: %w", port.Invalidf("negative grace period"))
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return rep, fmt.Errorf("sandbox: sweep workspaces: %w", err)
	}
	now := time.Now()
	for _, e := range entries {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		if !strings.HasPrefix(e.Name(), workspacePrefix) || e.Type()&fs.ModeSymlink != 0 || !e.IsDir() {
			continue
		}
		holder := filepath.Join(parent, e.Name())
		m, err := readMarker(holder)
		if errors.Is(err, fs.ErrNotExist) {
			continue // not marked: not ours to judge
		}
		if err != nil {
			rep.Errors = append(rep.Errors, err)
			continue
		}
		if m.Owner != owner || (opts.RunID != "" && m.RunID != opts.RunID) || now.Sub(m.Created) < opts.OlderThan {
			continue
		}
		w := &Workspace{holder: holder, dir: filepath.Join(holder, "workspace")}
		if !opts.DryRun {
			if err := w.Remove(); err != nil {
				rep.Errors = append(rep.Errors, err)
				continue
			}
		}
		rep.Removed = append(rep.Removed, "workspace:"+w.dir)
	}
	return rep, nil
}

// validateOwner applies the owner label's rules (those of run IDs).
func validateOwner(owner string) error {
	if port.ValidateRunID(owner) != nil {
		return port.Invalidf("owner %q is not a valid owner (the alphabet and length of run IDs)", owner)
	}
	return nil
}
