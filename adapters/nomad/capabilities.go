package nomad

import "github.com/agentsandbox/sandbox/port"

var (
	_ port.RunnerCapable = (*Runner)(nil)
	_ port.ProxyCapable  = (*Runner)(nil)
)

// RunnerCapabilities implements port.RunnerCapable: the docker driver's sandbox
// always has no network and reserves whole cores; host paths are mounted unless
// WithHostPaths(false), and WithWorkspaceCopy serves the workspace without them.
func (r *Runner) RunnerCapabilities() port.RunnerCapabilities {
	return port.RunnerCapabilities{HostPaths: r.cfg.hostPaths, WorkspaceCopy: r.cfg.copyWorkspace}.Discovered(r)
}

// ProxyCapabilities implements port.ProxyCapable: the sidecar runs the in-process
// proxy's engine (budget, attestation, body policy) but serves no egress.
func (r *Runner) ProxyCapabilities() port.ProxyCapabilities {
	return port.ProxyCapabilities{Budget: true, Attestation: true, BodyPolicy: true}
}
