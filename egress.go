package sandbox

import (
	"fmt"

	"github.com/agentsandbox/sandbox/port"
)

// WithEgress lets runs reach the web through their proxy's egress front: a request's
// Egress policy (default deny) says which providers it may reach, and creds resolves
// the {{name}} placeholders the agent writes instead of credentials. onAudit, if not
// nil, receives every egress record as it happens (a run's own EgressPolicy.OnAudit
// wins). Runs need LLM access (WithLLM) with a proxy manager that serves egress
// (adapters/inprocproxy); others refuse such runs with port.ErrUnsupported.
func WithEgress(creds port.CredentialSource, onAudit func(port.EgressRecord)) Option {
	return func(s *Sandbox) error {
		s.egress = &egressConfig{creds: creds, onAudit: onAudit}
		return nil
	}
}

type egressConfig struct {
	creds   port.CredentialSource
	onAudit func(port.EgressRecord)
}

// egressPolicy is the run's policy with the sandbox's credential source and audit
// callback filled in; nil when the request has none.
func (s *Sandbox) egressPolicy(req Request) (*port.EgressPolicy, error) {
	if req.Egress == nil {
		return nil, nil
	}
	if s.egress == nil || s.llm == nil {
		return nil, port.Invalidf("the request has an egress policy, but egress (WithEgress) or LLM access (WithLLM) is not configured")
	}
	p := *req.Egress
	if p.Credentials == nil {
		p.Credentials = s.egress.creds
	}
	if p.OnAudit == nil {
		p.OnAudit = s.egress.onAudit
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	return &p, nil
}
