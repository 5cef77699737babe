package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// inprocHarness is the in-process proxy manager with its leftover check and kill.
func inprocHarness(t *testing.T) (*inprocproxy.Manager, func(context.Context, string) ([]string, error), func(context.Context, port.Proxy) error) {
	base, err := os.MkdirTemp("", "porttest-inproc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	m, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(testenv.Owner("porttest")), inprocproxy.WithSandboxUID(1001))
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
	runner, ref := probeDockerRunner(t, dockerClient(t), docker.WithOwner(testenv.Owner("porttest")))
	m, leftovers, kill := inprocHarness(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}

func TestInprocConformanceContainerd(t *testing.T) {
	runner, ref := probeContainerdRunner(t, containerd.WithOwner(testenv.Owner("porttest")))
	m, leftovers, kill := inprocHarness(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}
