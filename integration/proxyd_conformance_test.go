package integration

import (
	"testing"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// The proxy conformance suite against the shared daemon (a separate process),
// with the bridge in token mode: the daemon writes the run token next to the
// socket, the bridge sends it on every request.
func TestProxydConformanceDocker(t *testing.T) {
	runner, ref := probeDockerRunner(t, dockerClient(t), docker.WithOwner(testenv.Owner("porttest-proxyd")))
	m, leftovers, kill := proxydHarnessParts(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}

func TestProxydConformanceContainerd(t *testing.T) {
	runner, ref := probeContainerdRunner(t, containerd.WithOwner(testenv.Owner("porttest-proxyd")))
	m, leftovers, kill := proxydHarnessParts(t)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{Manager: m, Runner: runner, Image: ref, Kill: kill, Leftovers: leftovers})
}
