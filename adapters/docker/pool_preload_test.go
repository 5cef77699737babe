package docker

import (
	"context"
	"os"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestPoolPreload runs the pre-booted slot suite (sandboxtest.TestPreloadPool) on
// Docker's warm pools with the generic Node.js preloader. About 20 s.
func TestPoolPreload(t *testing.T) {
	node := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", node != "", "NODE24_BIN is not set (scripts/install-openclaw.sh)")
	r, cli, _ := poolEnv(t, testenv.Owner("pool-preload"))
	ctx := context.Background()
	ref, archive, err := testimages.NodeArchive(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestPreloadPool(t, sandboxtest.PreloadHarness{
		Pooler: r, Image: ref, Node: testimages.NodeBinary,
		Leftovers: func(t testing.TB) []string { return ownedLeftovers(t, r, cli) },
	})
}

// TestPoolPreloadEndsWithHost: the ready slots of a host that died stop with their
// pre-booted runtimes (sandboxtest.TestPoolEndsWithHost). About 10 s.
func TestPoolPreloadEndsWithHost(t *testing.T) {
	node := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", node != "", "NODE24_BIN is not set (scripts/install-openclaw.sh)")
	h := poolHostHarness(t, 2)
	cli, _ := dockerEnv(t)
	ctx := context.Background()
	ref, archive, err := testimages.NodeArchive(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	h.Template = sandboxtest.PreloadTemplate(t, ref, testimages.NodeBinary)
	sandboxtest.TestPoolEndsWithHost(t, h)
}
