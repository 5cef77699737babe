package docker

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestProxyAbandonedByHost stands in for a host killed after starting a run's nginx
// proxy: Start returns, and nothing of this process ever calls Stop. From then on the
// key must be nowhere under the run's host directory, and the proxy must stop itself
// at its deadline (no host code enforces it: only the bridge inside the container).
// Sweep then leaves nothing of the owner. About 8 s on a quiet machine.
func TestProxyAbandonedByHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := bridge.Build(ctx, filepath.Join(os.TempDir(), "agentsandbox-bridge-test"))
	if err != nil {
		t.Fatal(err)
	}
	owner := sandboxtest.RunID("pf") // short: the socket path has a 108-byte limit
	m, _, _, base := proxyEnv(t, owner, WithProxyBridge(bin))
	cli, _ := dockerEnv(t)
	fake := litellmtest.NewServer()
	defer fake.Close()
	spec := func(runID string, deadline time.Time) port.ProxySpec {
		return port.ProxySpec{RunID: runID, Upstream: fake.URL, APIKey: fake.MasterKey(), Attribution: port.Attribution{BillingAccountID: "acct-fault", UserID: "u"}, Deadline: deadline}
	}
	// The lifetime leaves room for a start as slow as one measured now (the machine
	// may be loaded), so the proxy is up well before its deadline.
	t0 := time.Now()
	first, err := m.Start(ctx, spec(sandboxtest.RunID("measure"), time.Time{}))
	if err != nil {
		t.Fatal(err)
	}
	startup := time.Since(t0)
	if _, err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	lifetime := 3*startup + 3*time.Second
	runID := sandboxtest.RunID("abandon")
	deadline := time.Now().Add(lifetime)
	p, err := m.Start(ctx, spec(runID, deadline))
	if err != nil {
		t.Fatal(err)
	}
	np := p.(*nginxProxy)
	t.Cleanup(func() { _, _ = m.Sweep(context.Background(), port.SweepOptions{}) })

	// The key is on no file of the run's directory once Start has returned.
	key := []byte(fake.MasterKey())
	err = filepath.WalkDir(np.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, key) {
			t.Errorf("the key is on disk in %s after the proxy started", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// And the proxy, which read it, still works.
	hc := unixClient(filepath.Join(np.dir, "sock", port.LLMSocketName))
	if resp, err := hc.Get("http://proxy/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health after the configuration left the disk: %v %v", resp, err)
	}

	// Stopped by its own deadline (plus the bridge's grace), with no Stop.
	end := deadline.Add(20 * time.Second)
	for {
		ins, err := cli.ContainerInspect(ctx, np.id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !ins.Container.State.Running {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the proxy still runs %v past its deadline with no host to stop it", time.Since(deadline))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := m.Sweep(ctx, port.SweepOptions{}); err != nil {
		t.Fatal(err)
	}
	left, err := leftovers(cli)(ctx, runID)
	if err != nil || len(left) > 0 {
		t.Errorf("after Sweep: %v %v", left, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(base, owner)); len(ents) > 0 {
		t.Errorf("run directories left after Sweep: %v", ents)
	}
}
