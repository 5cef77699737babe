package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// TestSweepWorkspaces: a crashed host's workspaces (its owner's, past the grace
// period) are removed with whatever the agent left in them; other owners', fresh
// ones, unmarked directories and links are left alone; DryRun only reports.
func TestSweepWorkspaces(t *testing.T) {
	parent := t.TempDir()
	ctx := context.Background()
	mine, err := NewWorkspace(parent, "", WithWorkspaceOwner("svc-a"), WithWorkspaceRunID("run-1"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(mine.Dir(), "prompt.json"), []byte("secret prompt"), 0o644))
	must(t, os.Symlink("/", filepath.Join(mine.Dir(), "escape")))
	other, err := NewWorkspace(parent, "", WithWorkspaceOwner("svc-b"))
	must(t, err)
	defer other.Remove()
	unmarked := filepath.Join(parent, workspacePrefix+"unmarked")
	must(t, os.Mkdir(unmarked, 0o700))
	canary := filepath.Join(t.TempDir(), "canary")
	must(t, os.WriteFile(canary, []byte("x"), 0o644))
	must(t, os.Symlink(filepath.Dir(canary), filepath.Join(parent, workspacePrefix+"link")))

	// Within the grace period: kept.
	rep, err := SweepWorkspaces(ctx, parent, "svc-a", port.SweepOptions{OlderThan: time.Hour})
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("grace: %+v %v", rep, err)
	}
	rep, err = SweepWorkspaces(ctx, parent, "svc-a", port.SweepOptions{DryRun: true})
	if err != nil || len(rep.Removed) != 1 || rep.Removed[0] != "workspace:"+mine.Dir() {
		t.Fatalf("dry run: %+v %v", rep, err)
	}
	mustStat(t, mine.Dir())
	rep, err = SweepWorkspaces(ctx, parent, "svc-a", port.SweepOptions{RunID: "run-2"})
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("another run: %+v %v", rep, err)
	}
	rep, err = SweepWorkspaces(ctx, parent, "svc-a", port.SweepOptions{RunID: "run-1"})
	if err != nil || len(rep.Removed) != 1 || len(rep.Errors) != 0 {
		t.Fatalf("sweep: %+v %v", rep, err)
	}
	if _, err := os.Stat(filepath.Dir(mine.Dir())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the swept workspace is still there: %v", err)
	}
	mustStat(t, other.Dir())
	mustStat(t, unmarked)
	mustStat(t, canary)
	if _, err := SweepWorkspaces(ctx, parent, "bad owner!", port.SweepOptions{}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("bad owner: %v", err)
	}
	if _, err := NewWorkspace(parent, "", WithWorkspaceOwner("")); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("empty owner: %v", err)
	}
}
