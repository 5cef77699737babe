package kubernetes

import "github.com/agentsandbox/sandbox/port"

var _ port.RunnerCapable = (*Runner)(nil)

// RunnerCapabilities implements port.RunnerCapable: a sandbox Pod always has no
// network; CPU limits may be fractions of a core (millicores); host paths are hostPath
// volumes unless WithHostPaths(false); sessions need host paths and a REST
// configuration (see Start).
func (r *Runner) RunnerCapabilities() port.RunnerCapabilities {
	c := port.RunnerCapabilities{FractionalCPU: true, HostPaths: r.cfg.hostPaths}.Discovered(r)
	c.Sessions = c.Sessions && r.sessionsPossible() == nil
	return c
}
