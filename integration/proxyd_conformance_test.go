package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/internal/testenv"
	"github.com/agentsandbox/sandbox/internal/testimages"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// The proxy conformance suite against the shared daemon (a separate process),
// with the bridge in token mode: the daemon writes the run token next to the
// socket, the bridge sends it on every request.
func TestProxydConformanceDocker(t *testing.T) {
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
	runner, err := docker.NewRunner(docker.WithClient(cli), docker.WithBridge(bin), docker.WithOwner(testenv.Owner("porttest-proxyd")))
	if err != nil {
		t.Fatal(err)
	}
	m, leftovers, kill := proxydHarnessParts(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}

func TestProxydConformanceContainerd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := bridge.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	runner, err := containerd.NewRunner(containerd.WithNamespace("agentsandbox-test"), containerd.WithBridge(bin), containerd.WithOwner(testenv.Owner("porttest-proxyd")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Close() })
	perr := runner.Ping(ctx)
	testenv.Need(t, "containerd", perr == nil, "no containerd reachable")
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.LoadImage(ctx, strings.NewReader(string(archive))); err != nil {
		t.Fatal(err)
	}
	m, leftovers, kill := proxydHarnessParts(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}
