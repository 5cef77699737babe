package docker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestRunLease(t *testing.T) {
	cli, image := dockerEnv(t)
	owner := testenv.Owner("lease")
	r, err := NewRunner(WithClient(cli), WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewRunner(WithClient(cli), WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestRunLease(t, sandboxtest.LeaseHarness{
		Runner: r, Other: other, Image: image, Leftovers: drained(r, leftovers(cli)),
		Remove: forceRemove(cli),
	})
}

// TestPoolRunLease is TestRunLease on pooled runs: a claimed sandbox holds the run's
// lease (and a ready one its slot's), so another process's Sweep with the same owner
// leaves it alone, and a pooled run whose sandbox someone removed ends with
// port.ErrRemoved. Every run must be served warm. About 10 s.
func TestPoolRunLease(t *testing.T) {
	r, cli, image := poolEnv(t, testenv.Owner("pool-lease"))
	other, err := NewRunner(WithClient(cli), WithOwner(r.cfg.owner), WithPoolDir(r.cfg.poolDir))
	if err != nil {
		t.Fatal(err)
	}
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
		Runner: warmOnly{p}, Other: other, Image: image, Leftovers: poolLeftovers(r, cli),
		Remove: func(ctx context.Context, runID string) error {
			cs, err := r.pooledContainers(ctx, runID)
			if err != nil {
				return err
			}
			for _, c := range cs {
				if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
					return err
				}
			}
			return nil
		},
	})
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := ownedLeftovers(t, r, cli); len(left) > 0 {
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
	cli, image := dockerEnv(t)
	dir := t.TempDir()
	t.Setenv(poolCrashEnv, dir)
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("crash-pool")), WithPoolDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestLeaseAcrossNamespaces(t, sandboxtest.CrashHarness{Sweeper: r, Leftovers: poolLeftovers(r, cli), Image: image, Bridge: testenv.Bridge(t)})
	if left := ownedLeftovers(t, r, cli); len(left) > 0 {
		t.Errorf("after the host died and a sweep: %v", left)
	}
}

// forceRemove removes a run's containers from under it, as an operator would.
func forceRemove(cli *client.Client) func(ctx context.Context, runID string) error {
	return func(ctx context.Context, runID string) error {
		cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", port.LabelRunID+"="+runID)})
		if err != nil {
			return err
		}
		for _, c := range cs.Items {
			if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestSessionLease: an open session handle holds a lease like a run
// (sandboxtest.TestSessionLease). About 10 s.
func TestSessionLease(t *testing.T) {
	cli, image := dockerEnv(t)
	owner := testenv.Owner("sess-lease")
	root := t.TempDir()
	mk := func() *Runner {
		r, err := NewRunner(WithClient(cli), WithOwner(owner), WithBridge(testenv.Bridge(t)), WithSessionDir(root))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r, other := mk(), mk()
	sandboxtest.TestSessionLease(t, sandboxtest.SessionLeaseHarness{
		Runner: r, Other: other, Image: image, Leftovers: drained(r, leftovers(cli)), Remove: forceRemove(cli),
	})
}
