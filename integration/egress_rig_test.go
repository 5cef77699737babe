package integration

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/internal/egress/egresstest"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/port"
)

// egressRig is the host side the hostile egress runs share: an in-process proxy
// manager with egress (its names resolved by res, its upstreams trusted by roots,
// loopback allowed for the test's servers), a facade whose egress credential is
// egressCanary and whose live egress records are kept, the debug log, and the
// agent's script and curl ready to mount.
type egressRig struct {
	sb     *sandbox.Sandbox
	logs   *testenv.SyncBuffer
	mounts []port.Mount

	mu   sync.Mutex
	live []port.EgressRecord
}

func newEgressRig(ctx context.Context, t *testing.T, runner port.SandboxRunner, owner string, res *egresstest.Resolver, roots []byte, llmURL string, agent []byte) *egressRig {
	t.Helper()
	g := &egressRig{logs: &testenv.SyncBuffer{}}
	logger := slog.New(slog.NewTextHandler(g.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	base, err := os.MkdirTemp("", "egress")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	proxies, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(owner), inprocproxy.WithSandboxUID(1001), inprocproxy.WithLogger(logger),
		inprocproxy.WithEgressResolver(res), inprocproxy.WithEgressUpstreamRoots(roots),
		inprocproxy.WithEgressUnsafeAllow(netip.MustParsePrefix("127.0.0.1/32")))
	require.NoError(t, err)
	t.Cleanup(func() { proxies.Shutdown(context.Background()) })

	creds := port.CredentialFunc(func(context.Context, string, string, string) (string, error) { return egressCanary, nil })
	g.sb, err = sandbox.New(runner, sandbox.WithLogger(logger),
		sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: llmURL, APIKey: testKey}),
		sandbox.WithEgress(creds, func(r port.EgressRecord) { g.mu.Lock(); g.live = append(g.live, r); g.mu.Unlock() }))
	require.NoError(t, err)

	app := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(app, "agent.js"), agent, 0o644))
	curlDir := t.TempDir()
	require.NoError(t, testimages.CurlDir(ctx, curlDir))
	require.NoError(t, os.Chmod(app, 0o755))
	require.NoError(t, os.Chmod(curlDir, 0o755))
	g.mounts = []port.Mount{{Source: app, Target: testimages.AppDir}, {Source: curlDir, Target: testimages.CurlMountDir}}
	return g
}

// liveRecords is how many egress records reached the live stream so far.
func (g *egressRig) liveRecords() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.live)
}
