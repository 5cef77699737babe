package port

import "fmt"

// ProxyCapabilities is what a ProxyManager's proxies can do, declared once by the
// adapter (as Nomad's drivers declare DriverCapabilities), so a caller can refuse a
// spec before it does anything for the run: no file written, no clone made, no
// proxy started. Start still refuses what the manager cannot do; the declaration
// only lets the refusal come first.
type ProxyCapabilities struct {
	// Budget: the proxies enforce ProxySpec.Budget.
	Budget bool
	// Attestation: the proxies receive the bridge's attestation (they implement
	// Attester) and honour ProxySpec.RequireAttestation.
	Attestation bool
	// Egress: the proxies serve ProxySpec.Egress (they implement EgressAuditor).
	Egress bool
	// BodyPolicy: the proxies apply each route's body-key allowlist and set the
	// billing account as the body's user (the nginx proxy forwards bodies as
	// written, and only when its caller acknowledged that).
	BodyPolicy bool
	// BodiesRefused: the proxies cannot apply the body policy and, as the manager is
	// configured, refuse to forward bodies as written, so every spec is refused (the
	// Docker nginx manager made without WithUnfilteredBodies).
	BodiesRefused bool
}

// ProxyCapable is an optional capability of a ProxyManager (found by type
// assertion): its declared capabilities. A manager without it declares nothing and
// refuses what it cannot do at Start.
type ProxyCapable interface {
	ProxyCapabilities() ProxyCapabilities
}

// Check returns nil when proxies with c can serve spec, else an error wrapping
// ErrUnsupported that names the first field they cannot.
func (c ProxyCapabilities) Check(spec ProxySpec) error {
	switch {
	case spec.Budget != (Budget{}) && !c.Budget:
		return fmt.Errorf("%w: the proxy manager cannot enforce a call or token budget", ErrUnsupported)
	case spec.RequireAttestation && !c.Attestation:
		return fmt.Errorf("%w: the proxy manager cannot receive the sandbox's attestation (RequireAttestation)", ErrUnsupported)
	case spec.Egress != nil && !c.Egress:
		return fmt.Errorf("%w: the proxy manager has no egress front", ErrUnsupported)
	case c.BodiesRefused:
		return fmt.Errorf("%w: the proxy manager cannot filter request bodies and was not allowed to forward them as written", ErrUnsupported)
	}
	return nil
}

// CheckProxy checks spec against m's declared capabilities (ProxyCapable); a
// manager that declares none passes (its Start decides).
func CheckProxy(m ProxyManager, spec ProxySpec) error {
	if c, ok := m.(ProxyCapable); ok {
		return c.ProxyCapabilities().Check(spec)
	}
	return nil
}

// RunnerCapabilities is what a SandboxRunner can do, declared once by the adapter,
// so a caller can refuse a spec before any side effect, and a conformance suite
// knows what to expect. The optional interfaces (Sweeper, SessionRunner, Pooler,
// OOMClassifier, RuntimeReporter) stay the way to use a capability; these fields
// say which of them the runner has, in one place.
type RunnerCapabilities struct {
	// InternalNetworks: the runner joins RunSpec.Network.Internal networks (without
	// it, every sandbox has no network at all).
	InternalNetworks bool
	// FractionalCPU: Limits.NanoCPUs may be any amount, not only whole cores.
	FractionalCPU bool
	// HostPaths: the runner mounts host directories (RunSpec.WorkspaceDir, Mounts,
	// a host socket directory) into the sandbox.
	HostPaths bool
	// WorkspaceCopy: without HostPaths, the workspace is copied in and out
	// instead of mounted, so RunSpec.WorkspaceDir is still served.
	WorkspaceCopy bool
	// Sweep, Sessions and Pool say the runner implements Sweeper, SessionRunner
	// and Pooler (Pool: it can pool at all; a template may still be refused).
	Sweep, Sessions, Pool bool
	// OOMExact is OOMClassifier's answer (true for a runner without it).
	OOMExact bool
	// Runtime is RuntimeReporter's answer ("" when the runner does not say).
	Runtime string
}

// RunnerCapable is an optional capability of a SandboxRunner (found by type
// assertion): its declared capabilities. A runner without it declares nothing and
// refuses what it cannot do at RunOnce.
type RunnerCapable interface {
	RunnerCapabilities() RunnerCapabilities
}

// Check returns nil when a runner with c can run spec, else an error wrapping
// ErrUnsupported that names the first field it cannot. It checks only what the
// capabilities cover; RunOnce validates the rest.
func (c RunnerCapabilities) Check(spec RunSpec) error {
	switch {
	case spec.Network.Internal != "" && !c.InternalNetworks:
		return fmt.Errorf("%w: the runner has no networks: only network=none", ErrUnsupported)
	case spec.Limits.NanoCPUs > 0 && spec.Limits.NanoCPUs%1e9 != 0 && !c.FractionalCPU:
		return fmt.Errorf("%w: a CPU limit of %v cores; the runner reserves only whole cores", ErrUnsupported, float64(spec.Limits.NanoCPUs)/1e9)
	case !c.HostPaths && (len(spec.Mounts) > 0 || (spec.LLM != nil && spec.LLM.HostDir != "")):
		return fmt.Errorf("%w: the runner does not mount host paths (mounts, a host socket directory)", ErrUnsupported)
	case !c.HostPaths && !c.WorkspaceCopy && spec.WorkspaceDir != "":
		return fmt.Errorf("%w: the runner does not mount host paths (the workspace)", ErrUnsupported)
	}
	return nil
}

// CheckRunner checks spec against r's declared capabilities (RunnerCapable); a
// runner that declares none passes (its RunOnce decides).
func CheckRunner(r SandboxRunner, spec RunSpec) error {
	if c, ok := r.(RunnerCapable); ok {
		return c.RunnerCapabilities().Check(spec)
	}
	return nil
}

// Discovered returns c with Sweep, Sessions, Pool, OOMExact and Runtime set from the
// optional interfaces r implements, so a runner's declaration cannot disagree with
// them.
func (c RunnerCapabilities) Discovered(r SandboxRunner) RunnerCapabilities {
	_, c.Sweep = r.(Sweeper)
	_, c.Sessions = r.(SessionRunner)
	_, c.Pool = r.(Pooler)
	c.OOMExact = true
	if o, ok := r.(OOMClassifier); ok {
		c.OOMExact = o.OOMExact()
	}
	c.Runtime = ""
	if rr, ok := r.(RuntimeReporter); ok {
		c.Runtime = rr.Runtime()
	}
	return c
}
