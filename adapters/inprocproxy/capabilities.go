package inprocproxy

import "github.com/agentsandbox/sandbox/port"

var _ port.ProxyCapable = (*Manager)(nil)

// ProxyCapabilities implements port.ProxyCapable: the in-process proxy does all
// of it.
func (m *Manager) ProxyCapabilities() port.ProxyCapabilities {
	return port.ProxyCapabilities{Budget: true, Attestation: true, Egress: true, BodyPolicy: true}
}
