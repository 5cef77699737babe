package kubernetes

import "github.com/agentsandbox/sandbox/port"

var _ port.RunnerCapable = (*Runner)(nil)

// RunnerCapabilities implements port.RunnerCapable: a sandbox Pod always has no
// network; CPU limits may be fractions of a core (millicores); host paths are hostPath
// volumes unless WithHostPaths(false).
func (r *Runner) RunnerCapabilities() port.RunnerCapabilities {
	return port.RunnerCapabilities{FractionalCPU: true, HostPaths: r.cfg.hostPaths}.Discovered(r)
}
