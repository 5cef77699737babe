package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inproc"
	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/internal/testenv"
	"github.com/agentsandbox/sandbox/internal/testimages"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// inprocHarness is the in-process proxy manager with its leftover check and kill.
func inprocHarness(t *testing.T) (*inproc.Manager, func(context.Context, string) ([]string, error), func(context.Context, port.Proxy) error) {
	base, err := os.MkdirTemp("", "porttest-inproc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	m, err := inproc.NewManager(inproc.WithBaseDir(base), inproc.WithOwner(testenv.Owner("porttest")), inproc.WithSandboxUID(1001))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	leftovers := func(_ context.Context, runID string) ([]string, error) {
		dir := filepath.Join(base, testenv.Owner("porttest"))
		entries, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			return nil, nil
		}
		var out []string
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if strings.HasSuffix(e.Name(), ".json") {
				var mk struct{ Labels map[string]string }
				if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &mk) == nil && mk.Labels[port.LabelRunID] == runID {
					out = append(out, "marker:"+p)
				}
			} else if strings.HasPrefix(e.Name(), runID+"-") {
				out = append(out, "dir:"+p)
			}
		}
		return out, err
	}
	// The in-process proxy dies with its host; the closest crash is a Stop whose
	// context is already over, which cuts every stream at once.
	kill := func(_ context.Context, p port.Proxy) error {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := p.Stop(ctx)
		return err
	}
	return m, leftovers, kill
}

func TestInprocConformanceDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	testenv.Need(t, "docker", err == nil, "no Docker daemon reachable")
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	bin, err := bridge.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	runner, err := docker.NewRunner(docker.WithClient(cli), docker.WithBridge(bin), docker.WithOwner(testenv.Owner("porttest")))
	if err != nil {
		t.Fatal(err)
	}
	m, leftovers, kill := inprocHarness(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}

func TestInprocConformanceContainerd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := bridge.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	runner, err := containerd.NewRunner(containerd.WithNamespace("agentsandbox-test"), containerd.WithBridge(bin), containerd.WithOwner(testenv.Owner("porttest")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Close() }) // after the parallel subtests, unlike a defer
	perr := runner.Ping(ctx)
	testenv.Need(t, "containerd", perr == nil, "no containerd reachable")
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.LoadImage(ctx, strings.NewReader(string(archive))); err != nil {
		t.Fatal(err)
	}
	m, leftovers, kill := inprocHarness(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}
