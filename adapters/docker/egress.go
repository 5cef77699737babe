package docker

import (
	"github.com/agentsandbox/sandbox/internal/bridge"
	"github.com/agentsandbox/sandbox/port"
)

// egressOn says the run's socket directory serves egress.
func egressOn(spec port.RunSpec) bool { return spec.LLM != nil && spec.LLM.Egress }

// egressPrefix adds the bridge's egress listener to its command line when the run
// has egress.
func egressPrefix(spec port.RunSpec, prefix []string) []string {
	if !egressOn(spec) {
		return prefix
	}
	return bridge.WithEgress(prefix)
}
