package sandboxtest

import (
	"context"
	"errors"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// testDeclaredRefusals: what a runner declares it cannot do (port.RunnerCapable)
// RunOnce refuses with port.ErrUnsupported, creating nothing, and the declaration's
// own Check agrees, so a caller that checks first refuses the same specs. A runner
// that declares nothing has nothing to hold it to here.
func testDeclaredRefusals(t *testing.T, s *suite) {
	rc, ok := s.h.Runner.(port.RunnerCapable)
	if !ok {
		t.Log("the runner declares no capabilities (port.RunnerCapable)")
		return
	}
	c := rc.RunnerCapabilities()
	type refusal struct {
		name string
		mut  func(*port.RunSpec)
	}
	var refusals []refusal
	if !c.InternalNetworks {
		refusals = append(refusals, refusal{"internal network", func(sp *port.RunSpec) { sp.Network.Internal = "sandboxtest-no-such-net" }})
	}
	if !c.FractionalCPU {
		refusals = append(refusals, refusal{"fractional cpu", func(sp *port.RunSpec) { sp.Limits.NanoCPUs = 1.5e9 }})
	}
	if !c.HostPaths {
		dir := t.TempDir()
		refusals = append(refusals, refusal{"mount", func(sp *port.RunSpec) { sp.Mounts = []port.Mount{{Source: dir, Target: "/data"}} }})
		if !c.WorkspaceCopy {
			refusals = append(refusals, refusal{"workspace", func(sp *port.RunSpec) { sp.WorkspaceDir = dir }})
		}
	}
	for _, r := range refusals {
		spec := s.spec("declared", "echo", "must not run")
		r.mut(&spec)
		if err := c.Check(spec); !errors.Is(err, port.ErrUnsupported) {
			t.Errorf("%s: the declaration's Check = %v, want ErrUnsupported", r.name, err)
		}
		res, err := s.run(t, context.Background(), spec)
		if !errors.Is(err, port.ErrUnsupported) || res != nil {
			t.Errorf("%s: RunOnce = %+v, %v; want ErrUnsupported and no result", r.name, res, err)
		}
	}
	t.Logf("capabilities %+v: %d declared refusals checked", c, len(refusals))
}

// testProxyDeclaredRefusals: what a proxy manager declares it cannot serve
// (port.ProxyCapable) its Start refuses with port.ErrUnsupported, leaving nothing,
// and the declaration's own Check agrees. (Budget and attestation refusals are
// also the CallBudget and IsolationAttested cases.)
func testProxyDeclaredRefusals(t *testing.T, h ProxyHarness) {
	pc, ok := h.Manager.(port.ProxyCapable)
	if !ok {
		t.Log("the manager declares no capabilities (port.ProxyCapable)")
		return
	}
	c := pc.ProxyCapabilities()
	u := newUpstream(t)
	type refusal struct {
		name string
		mut  func(*port.ProxySpec)
	}
	var refusals []refusal
	if !c.Budget {
		refusals = append(refusals, refusal{"budget", func(sp *port.ProxySpec) { sp.Budget.MaxTokens = 10 }})
	}
	if !c.Attestation {
		refusals = append(refusals, refusal{"attestation", func(sp *port.ProxySpec) { sp.RequireAttestation = true }})
	}
	if !c.Egress {
		refusals = append(refusals, refusal{"egress", func(sp *port.ProxySpec) {
			sp.Egress = &port.EgressPolicy{Providers: []port.EgressProvider{{ID: "gh", URIs: []string{"https://api.github.com/"}}}}
		}})
	}
	if c.BodiesRefused {
		refusals = append(refusals, refusal{"unfiltered bodies", func(*port.ProxySpec) {}})
	}
	for _, r := range refusals {
		spec := proxySpec(RunID("declared"), u)
		r.mut(&spec)
		if err := c.Check(spec); !errors.Is(err, port.ErrUnsupported) {
			t.Errorf("%s: the declaration's Check = %v, want ErrUnsupported", r.name, err)
		}
		p, err := h.Manager.Start(context.Background(), spec)
		if p != nil {
			_, _ = p.Stop(context.Background())
		}
		if !errors.Is(err, port.ErrUnsupported) {
			t.Errorf("%s: Start = %v, want ErrUnsupported", r.name, err)
		}
		if left, _ := h.Leftovers(context.Background(), spec.RunID); len(left) > 0 {
			t.Errorf("%s: refused start left %v", r.name, left)
		}
	}
	t.Logf("capabilities %+v: %d declared refusals checked", c, len(refusals))
}
