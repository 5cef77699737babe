package containerd

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

const testNamespace = "agentsandbox-test"

var env struct {
	once  sync.Once
	image string
	err   error
	up    bool
}

// runnerEnv returns a runner on a reachable containerd with the probe agent image
// imported, skipping (or, in CI, failing) when there is no daemon.
func runnerEnv(t testing.TB, opts ...Option) (*Runner, string) {
	t.Helper()
	r, err := NewRunner(append([]Option{WithNamespace(testNamespace)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	env.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if env.err = r.Ping(ctx); env.err != nil {
			return
		}
		env.up = true
		ref, archive, err := sandboxtest.ProbeImage(ctx)
		if err != nil {
			env.err = err
			return
		}
		if _, err := r.imageInfo(r.ns(ctx), ref); err == nil {
			env.image = ref
			return
		}
		if _, env.err = r.LoadImage(ctx, bytes.NewReader(archive)); env.err == nil {
			env.image = ref
		}
	})
	if !env.up {
		testenv.Need(t, "containerd", false, fmt.Sprintf("no containerd at %s: %v", DefaultAddress, env.err))
	}
	if env.err != nil {
		t.Fatalf("preparing the test image: %v", env.err)
	}
	return r, env.image
}

// leftovers lists the containers and snapshots still labelled with runID.
func leftovers(r *Runner) func(context.Context, string) ([]string, error) {
	return func(ctx context.Context, runID string) ([]string, error) {
		// Removals finish in the background after RunOnce returns: count what they leave.
		if err := r.Drain(ctx); err != nil {
			return nil, err
		}
		ctx = r.ns(ctx)
		filter := fmt.Sprintf(`labels.%q==%q`, port.LabelRunID, runID)
		var out []string
		cs, err := r.cli.Containers(ctx, filter)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			out = append(out, "container:"+c.ID())
		}
		err = r.cli.SnapshotService(r.cfg.snapshotter).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
			out = append(out, "snapshot:"+info.Name)
			return nil
		}, filter)
		if err != nil {
			return out, err
		}
		// The task's stdio FIFOs live in a randomly named directory under the daemon's
		// state, named after the container (agentsandbox-<run>-<hex>-std{out,err}).
		fifos, err := filepath.Glob(filepath.Join(FIFORoot, "*", containerIDPrefix(runID)+"*"))
		for _, f := range fifos {
			out = append(out, "fifo:"+f)
		}
		return out, err
	}
}

// containerIDPrefix is the start of every container ID of runID (see containerID).
func containerIDPrefix(runID string) string { return "agentsandbox-" + runID + "-" }
