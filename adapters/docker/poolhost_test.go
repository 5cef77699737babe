package docker

import (
	"context"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// poolHostDirEnv makes TestMain's crash child a host keeping a warm pool
// (sandboxtest.TestPoolEndsWithHost) with its slot directories under the value.
const poolHostDirEnv = "AGENTSANDBOX_TEST_POOL_HOST_DIR"

// poolHostHarness is the harness of the pool host tests for owner "pool-host".
func poolHostHarness(t *testing.T, size int) sandboxtest.PoolHostHarness {
	cli, image := dockerEnv(t)
	dir := t.TempDir()
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("pool-host")), WithPoolDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	return sandboxtest.PoolHostHarness{
		Sweeper: r, Env: []string{poolHostDirEnv + "=" + dir}, Bridge: testenv.Bridge(t),
		Template: port.TemplateOf(suiteSpec(image)), Size: size,
		Running: func(ctx context.Context) ([]string, error) {
			cs, err := cli.ContainerList(ctx, client.ContainerListOptions{Filters: client.Filters{}.Add("label", port.LabelOwner+"="+r.cfg.owner)})
			if err != nil {
				return nil, err
			}
			var out []string
			for _, c := range cs.Items {
				out = append(out, c.ID)
			}
			return out, nil
		},
		Leftovers: func(context.Context) ([]string, error) { return ownedLeftovers(t, r, cli), nil },
	}
}

// TestPoolEndsWithHost: the ready sandboxes of a host that died stop by themselves
// (sandboxtest.TestPoolEndsWithHost): the attach that would carry their claim is gone.
// About 10 s.
func TestPoolEndsWithHost(t *testing.T) {
	sandboxtest.TestPoolEndsWithHost(t, poolHostHarness(t, 3))
}

// TestPoolHostKilledWhileFilling: hosts killed while their pools' sandboxes are being
// made leave nothing running and, after a sweep, nothing at all
// (sandboxtest.TestPoolHostKilledWhileFilling). About 15 s.
func TestPoolHostKilledWhileFilling(t *testing.T) {
	sandboxtest.TestPoolHostKilledWhileFilling(t, poolHostHarness(t, 4))
}
