package containerd

import (
	"context"
	"fmt"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// poolHostDirEnv makes TestMain's crash child a host keeping a warm pool
// (sandboxtest.TestPoolEndsWithHost) with its slot directories under the value.
const poolHostDirEnv = "AGENTSANDBOX_TEST_POOL_HOST_DIR"

// poolHostHarness is the harness of the pool host tests for owner "pool-host".
func poolHostHarness(t *testing.T, size int) sandboxtest.PoolHostHarness {
	dir := t.TempDir()
	r, image := runnerEnv(t, WithOwner(testenv.Owner("pool-host")), WithPoolDir(dir))
	return sandboxtest.PoolHostHarness{
		Sweeper: r, Env: []string{poolHostDirEnv + "=" + dir}, Bridge: testenv.Bridge(t),
		Template: port.TemplateOf(suiteSpec(image)), Size: size,
		Running:   func(ctx context.Context) ([]string, error) { return runningOf(ctx, r) },
		Leftovers: func(context.Context) ([]string, error) { return ownedLeftovers(t, r), nil },
	}
}

// TestPoolEndsWithHost: the ready sandboxes of a host that died stop by themselves
// (sandboxtest.TestPoolEndsWithHost): their stubs read the end of their claim
// channel. About 10 s.
func TestPoolEndsWithHost(t *testing.T) {
	sandboxtest.TestPoolEndsWithHost(t, poolHostHarness(t, 3))
}

// TestPoolHostKilledWhileFilling: hosts killed while their pools' sandboxes are being
// made leave nothing running and, after a sweep, nothing at all: no shim without a
// task (sandboxtest.TestPoolHostKilledWhileFilling). About 15 s.
func TestPoolHostKilledWhileFilling(t *testing.T) {
	sandboxtest.TestPoolHostKilledWhileFilling(t, poolHostHarness(t, 4))
}

// runningOf lists r's owner's containers whose task runs (a created task runs none of
// the sandbox's processes: runc's init waits to be started).
func runningOf(ctx context.Context, r *Runner) ([]string, error) {
	ctx = r.ns(ctx)
	cs, err := r.cli.Containers(ctx, fmt.Sprintf(`labels.%q==%q`, port.LabelOwner, r.cfg.owner))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range cs {
		task, err := c.Task(ctx, nil)
		if errdefs.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		st, err := task.Status(ctx)
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		if st.Status != client.Stopped && st.Status != client.Created {
			out = append(out, fmt.Sprintf("%s(%s)", c.ID(), st.Status))
		}
	}
	return out, nil
}
