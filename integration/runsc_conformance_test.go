package integration

import (
	"context"
	"os"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// The proxy conformance suite, red-team checks included, with the sandboxes on gVisor
// (the runsc scripts/setup.sh builds and registers): the LLM socket, the bridge and
// the attestation through gVisor's own kernel.

func TestRunscProxyConformanceDocker(t *testing.T) {
	cli := dockerClient(t)
	info, err := cli.Info(context.Background(), client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ok := info.Info.Runtimes["runsc"]
	testenv.Need(t, "runsc", ok, "the Docker daemon has no runtime runsc (scripts/setup.sh registers it)")
	runner, ref := probeDockerRunner(t, cli, docker.WithOwner(testenv.Owner("porttest-runsc")), docker.WithRuntime("runsc"))
	m, leftovers, kill := inprocHarness(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}

func TestRunscProxyConformanceContainerd(t *testing.T) {
	_, err := os.Stat(containerd.RuntimeRunscWrapper)
	testenv.Need(t, "runsc", err == nil, "gVisor: "+containerd.RuntimeRunscWrapper+" is missing (scripts/setup.sh installs it)")
	runner, ref := probeContainerdRunner(t, containerd.WithOwner(testenv.Owner("porttest-runsc")), containerd.WithRuntime(containerd.RuntimeRunsc))
	m, leftovers, kill := inprocHarness(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}
