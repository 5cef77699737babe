// Package initenv is the environment the cluster runners' init programs
// (cmd/sandbox-nomad-init, cmd/sandbox-kube-init) give the agent: the orchestrator
// sets variables of its own in every container (service links, allocation
// details), so the init keeps only the spec's, named by the host on its command
// line.
package initenv

import (
	"os"
	"strings"
)

// Filter returns the variables of this process's environment that the agent
// keeps: PATH, HOME, HOSTNAME and those keep names (comma-separated), in the
// environment's order.
func Filter(keep string) []string {
	return filter(os.Environ(), keep)
}

func filter(environ []string, keep string) []string {
	keepSet := map[string]bool{"PATH": true, "HOME": true, "HOSTNAME": true}
	for _, k := range strings.Split(keep, ",") {
		if k != "" {
			keepSet[k] = true
		}
	}
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if keepSet[name] {
			env = append(env, kv)
		}
	}
	return env
}
