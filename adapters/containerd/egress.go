package containerd

import (
	"github.com/agentsandbox/sandbox/internal/bridge"
	"github.com/agentsandbox/sandbox/port"
)

// egressOn says the run's socket directory serves egress.
func egressOn(spec port.RunSpec) bool { return spec.LLM != nil && spec.LLM.Egress }

// addEgressEnv sets the proxy and CA variables of a run with egress (port.EgressEnv).
// They replace the caller's: the agent's own request cannot route around its proxy.
func addEgressEnv(env map[string]string, spec port.RunSpec) {
	if !egressOn(spec) {
		return
	}
	for k, v := range port.EgressEnv() {
		env[k] = v
	}
}

// egressPrefix adds the bridge's egress listener to its command line when the run
// has egress.
func egressPrefix(spec port.RunSpec, prefix []string) []string {
	if !egressOn(spec) {
		return prefix
	}
	return bridge.WithEgress(prefix)
}
