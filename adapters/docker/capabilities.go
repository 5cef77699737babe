package docker

import "github.com/agentsandbox/sandbox/port"

var (
	_ port.RunnerCapable = (*Runner)(nil)
	_ port.ProxyCapable  = (*ProxyManager)(nil)
)

// RunnerCapabilities implements port.RunnerCapable: Docker joins internal
// networks, takes any CPU amount and mounts host paths.
func (r *Runner) RunnerCapabilities() port.RunnerCapabilities {
	return port.RunnerCapabilities{InternalNetworks: true, FractionalCPU: true, HostPaths: true}.Discovered(r)
}

// ProxyCapabilities implements port.ProxyCapable: the nginx proxy enforces no
// budget, receives no attestation, has no egress front and cannot filter bodies,
// so without WithUnfilteredBodies it refuses every spec (as Start does; see Start).
func (m *ProxyManager) ProxyCapabilities() port.ProxyCapabilities {
	return port.ProxyCapabilities{BodiesRefused: !m.cfg.proxy.unfilteredBodies}
}
