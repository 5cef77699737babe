package docker

import (
	"errors"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// TestProxyCapabilitiesBodies: the nginx manager declares the refusal its Start
// makes without WithUnfilteredBodies, so the facade refuses before any side effect;
// acknowledged, it declares none of that. No daemon needed: the constructor does no
// I/O.
func TestProxyCapabilitiesBodies(t *testing.T) {
	spec := port.ProxySpec{RunID: "caps-bodies"}
	m, err := NewProxyManager()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if c := m.ProxyCapabilities(); !c.BodiesRefused || c.BodyPolicy {
		t.Errorf("without WithUnfilteredBodies: %+v, want BodiesRefused", c)
	}
	if err := port.CheckProxy(m, spec); !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("CheckProxy without WithUnfilteredBodies = %v, want ErrUnsupported", err)
	}
	ack, err := NewProxyManager(WithUnfilteredBodies())
	if err != nil {
		t.Fatal(err)
	}
	defer ack.Close()
	if c := ack.ProxyCapabilities(); c != (port.ProxyCapabilities{}) {
		t.Errorf("with WithUnfilteredBodies: %+v, want nothing declared", c)
	}
	if err := port.CheckProxy(ack, spec); err != nil {
		t.Errorf("CheckProxy with WithUnfilteredBodies = %v", err)
	}
}
