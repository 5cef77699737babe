package integration

import (
	"context"
	"os"
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

// The proxy conformance suite, red-team checks included, with the sandboxes on gVisor
// (the runsc scripts/setup.sh builds and registers): the LLM socket, the bridge and
// the attestation through gVisor's own kernel.

func TestRunscProxyConformanceDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	testenv.Need(t, "docker", err == nil, "no Docker daemon reachable")
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ok := info.Info.Runtimes["runsc"]
	testenv.Need(t, "runsc", ok, "the Docker daemon has no runtime runsc (scripts/setup.sh registers it)")
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
	runner, err := docker.NewRunner(docker.WithClient(cli), docker.WithBridge(bin), docker.WithOwner(testenv.Owner("porttest-runsc")), docker.WithRuntime("runsc"))
	if err != nil {
		t.Fatal(err)
	}
	m, leftovers, kill := inprocHarness(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}

func TestRunscProxyConformanceContainerd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := os.Stat(containerd.RuntimeRunscWrapper)
	testenv.Need(t, "runsc", err == nil, "gVisor: "+containerd.RuntimeRunscWrapper+" is missing (scripts/setup.sh installs it)")
	bin, err := bridge.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	runner, err := containerd.NewRunner(containerd.WithNamespace("agentsandbox-test"), containerd.WithBridge(bin), containerd.WithOwner(testenv.Owner("porttest-runsc")), containerd.WithRuntime(containerd.RuntimeRunscWrapper))
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
