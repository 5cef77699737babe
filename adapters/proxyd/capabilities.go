package proxyd

import "github.com/agentsandbox/sandbox/port"

var _ port.ProxyCapable = (*Manager)(nil)

// ProxyCapabilities implements port.ProxyCapable: the shared daemon runs the same
// engine as the in-process proxy, egress included.
func (m *Manager) ProxyCapabilities() port.ProxyCapabilities {
	return port.ProxyCapabilities{Budget: true, Attestation: true, Egress: true, BodyPolicy: true}
}
