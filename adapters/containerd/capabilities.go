package containerd

import "github.com/agentsandbox/sandbox/port"

var _ port.RunnerCapable = (*Runner)(nil)

// RunnerCapabilities implements port.RunnerCapable: containerd sandboxes have no
// network (no CNI), take any CPU amount and mount host paths.
func (r *Runner) RunnerCapabilities() port.RunnerCapabilities {
	return port.RunnerCapabilities{FractionalCPU: true, HostPaths: true}.Discovered(r)
}
