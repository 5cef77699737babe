package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

type fakeSweeper struct {
	removed []string
	err     error
	got     []port.SweepOptions
}

func (f *fakeSweeper) Sweep(_ context.Context, o port.SweepOptions) (port.SweepReport, error) {
	f.got = append(f.got, o)
	if f.err != nil {
		return port.SweepReport{}, f.err
	}
	return port.SweepReport{Removed: f.removed}, nil
}

// TestSweepEachEntryOnce: two sweepers naming the same resource (the leases two runners
// share) report it once, in the first; a sweeper that fails does not stop the next.
func TestSweepEachEntryOnce(t *testing.T) {
	a := &fakeSweeper{removed: []string{"container:1", "runlease:o/r"}}
	down := &fakeSweeper{err: port.ErrUnavailable}
	b := &fakeSweeper{removed: []string{"runlease:o/r", "container:2"}}
	reps, err := Sweep(context.Background(), port.SweepOptions{DryRun: true, RunID: "r"}, a, down, b)
	if !errors.Is(err, port.ErrUnavailable) {
		t.Errorf("err = %v, want the failed sweeper's", err)
	}
	want := [][]string{{"container:1", "runlease:o/r"}, nil, {"container:2"}}
	if len(reps) != 3 {
		t.Fatalf("%d reports", len(reps))
	}
	for i, r := range reps {
		if !reflect.DeepEqual(r.Removed, want[i]) {
			t.Errorf("report %d: %v, want %v", i, r.Removed, want[i])
		}
	}
	if b.got[0] != (port.SweepOptions{DryRun: true, RunID: "r"}) {
		t.Errorf("options passed on: %+v", b.got[0])
	}
	if _, err := Sweep(context.Background(), port.SweepOptions{RunID: "../x"}, a); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("bad options: %v", err)
	}
}

// TestWorkspaceSweeper: the sweeper form of SweepWorkspaces removes the owner's
// workspaces, and its dry run lists the same.
func TestWorkspaceSweeper(t *testing.T) {
	parent := t.TempDir()
	w, err := NewWorkspace(parent, "", WithWorkspaceOwner("sweep-owner"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewWorkspace(parent, "", WithWorkspaceOwner("other-owner"))
	if err != nil {
		t.Fatal(err)
	}
	sw := WorkspaceSweeper(parent, "sweep-owner")
	dry, err := sw.Sweep(context.Background(), port.SweepOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	real, err := sw.Sweep(context.Background(), port.SweepOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dry.Removed, real.Removed) || len(real.Removed) != 1 || real.Removed[0] != "workspace:"+w.Dir() {
		t.Errorf("dry %v, real %v", dry.Removed, real.Removed)
	}
	if _, err := os.Stat(filepath.Dir(w.Dir())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the workspace is still there: %v", err)
	}
	if _, err := os.Stat(other.Dir()); err != nil {
		t.Errorf("another owner's workspace went: %v", err)
	}
}
