package containerd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestRunLease(t *testing.T) {
	owner := sandboxtest.RunID("lease")
	r, image := runnerEnv(t, WithOwner(owner))
	other, _ := runnerEnv(t, WithOwner(owner))
	sandboxtest.TestRunLease(t, sandboxtest.LeaseHarness{
		Runner: r, Other: other, Image: image, Leftovers: leftovers(r),
		Remove: forceRemove(r),
	})
}

// TestRemovedBeforeTaskRan: a run whose sandbox someone deletes before its task runs
// (right after the container's create, or the task's) ends with port.ErrRemoved as a
// removal while it runs does, not as a failed container: TestRunLease's removal came
// that early on a loaded machine. Nothing of the run is left. About 2 s.
func TestRemovedBeforeTaskRan(t *testing.T) {
	for _, phase := range []string{"container", "task"} {
		t.Run(phase, func(t *testing.T) {
			runID := sandboxtest.RunID("early-rm")
			var remove func(context.Context, string) error
			removed := false
			r, image := runnerEnv(t, WithOwner(testenv.Owner("early-rm")), func(c *config) error {
				c.phaseHook = func(p string) {
					if p != phase || removed {
						return
					}
					removed = true
					if err := remove(context.Background(), runID); err != nil {
						t.Errorf("removing at %s: %v", phase, err)
					}
				}
				return nil
			})
			remove = forceRemove(r)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: image, Argv: []string{"/agent", "sleep", "30"}, Limits: port.Limits{Timeout: time.Minute}})
			if !removed {
				t.Fatalf("the run never reached its %s phase: %+v, %v", phase, res, err)
			}
			if !errors.Is(err, port.ErrRemoved) {
				t.Errorf("a run deleted after its %s = %+v, %v; want port.ErrRemoved", phase, res, err)
			}
			for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				left, err := leftovers(r)(ctx, runID)
				if err == nil && len(left) == 0 {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("left behind: %v %v", left, err)
				}
			}
		})
	}
}

// TestPoolRunLease is TestRunLease on pooled runs: a claimed sandbox holds the run's
// lease (and a ready one its slot's), so another process's Sweep with the same owner
// leaves it alone, and a pooled run whose sandbox someone removed ends with
// port.ErrRemoved. Every run must be served warm. About 10 s.
func TestPoolRunLease(t *testing.T) {
	r, image := poolEnv(t, "pool-lease")
	other, _ := runnerEnv(t, WithOwner(r.cfg.owner), WithPoolDir(r.cfg.poolDir))
	p, err := r.NewPool(context.Background(), port.TemplateOf(port.RunSpec{Image: image}), port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, p)
	// A ready sandbox is live too: a sweep of the whole owner leaves it.
	if rep, err := other.Sweep(context.Background(), port.SweepOptions{}); err != nil || len(rep.Removed) > 0 {
		t.Errorf("another process's Sweep of the owner with a ready pool = %v, %v; want nothing removed", rep.Removed, err)
	}
	sandboxtest.TestRunLease(t, sandboxtest.LeaseHarness{
		Runner: warmOnly{p}, Other: other, Image: image, Leftovers: leftovers(r),
		Remove: forceRemove(r),
	})
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := ownedLeftovers(t, r); len(left) > 0 {
		t.Errorf("after the pool closed: %v", left)
	}
}

// warmOnly runs on p once it has a ready sandbox, and fails a run it did not serve
// warm (the lease under test is the pooled one).
type warmOnly struct{ p *Pool }

func (w warmOnly) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	for end := time.Now().Add(time.Minute); w.p.Stats().Ready == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			return nil, fmt.Errorf("the pool never had a ready sandbox: %+v", w.p.Stats())
		}
	}
	res, err := w.p.RunOnce(ctx, spec)
	if res != nil && res.Start != port.StartWarm {
		return res, fmt.Errorf("run %s was served %q (%s), not warm", spec.RunID, res.Start, res.StartNote)
	}
	return res, err
}

// TestPoolLeaseAcrossNamespaces: a host with a full warm pool and a pooled run in
// flight, in its own PID namespace and with its own TMPDIR, is live for a Sweep from
// here (sandboxtest.TestLeaseAcrossNamespaces); once it is killed a sweep leaves
// nothing of the owner. About 15 s.
func TestPoolLeaseAcrossNamespaces(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(poolCrashEnv, dir)
	r, image := runnerEnv(t, WithOwner(testenv.Owner("crash-pool")), WithPoolDir(dir))
	sandboxtest.TestLeaseAcrossNamespaces(t, sandboxtest.CrashHarness{Sweeper: r, Leftovers: leftovers(r), Image: image, Bridge: testenv.Bridge(t)})
	if left := ownedLeftovers(t, r); len(left) > 0 {
		t.Errorf("after the host died and a sweep: %v", left)
	}
}

// forceRemove removes a run's containers (and tasks) from under it, as an operator
// would.
func forceRemove(r *Runner) func(ctx context.Context, runID string) error {
	return func(ctx context.Context, runID string) error {
		ctx = r.ns(ctx)
		cs, err := r.cli.Containers(ctx, fmt.Sprintf(`labels.%q==%q`, port.LabelRunID, runID))
		if err != nil {
			return err
		}
		for _, c := range cs {
			if err := deleteContainer(ctx, c, false); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestSessionLease: an open session handle holds a lease like a run
// (sandboxtest.TestSessionLease). About 10 s.
func TestSessionLease(t *testing.T) {
	owner := testenv.Owner("sess-lease")
	root := t.TempDir()
	opts := []Option{WithOwner(owner), WithBridge(testenv.Bridge(t)), WithSessionDir(root)}
	r, image := runnerEnv(t, opts...)
	other, _ := runnerEnv(t, opts...)
	sandboxtest.TestSessionLease(t, sandboxtest.SessionLeaseHarness{
		Runner: r, Other: other, Image: image, Leftovers: leftovers(r), Remove: forceRemove(r),
	})
}
