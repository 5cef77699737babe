package inprocproxy

import (
	"context"
	"crypto/x509"
	"net"
	"net/netip"
	"net/url"
	"os"

	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/port"
)

// Resolver looks host names up for the egress proxy; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// egressConfig is the manager-wide egress configuration.
type egressConfig struct {
	resolver      Resolver
	roots         *x509.CertPool // nil: system roots
	rootsPEM      []byte         // added to the agent's bundle (tunnel-only providers)
	unsafeAllow   []netip.Prefix
	upstreamProxy *url.URL
}

// WithEgressResolver sets the resolver the egress proxy uses (default
// net.DefaultResolver). Every address it returns is still checked on each dial.
func WithEgressResolver(r Resolver) Option {
	return func(c *config) error {
		if r == nil {
			return port.Invalidf("egress resolver is nil")
		}
		c.egress.resolver = r
		return nil
	}
}

// WithEgressUpstreamRoots makes the egress proxy verify upstream TLS against these PEM
// certificates instead of the system roots, and adds them to the agent's CA bundle
// (for tunnel-only providers). Meant for private CAs and tests.
func WithEgressUpstreamRoots(pemCerts []byte) Option {
	return func(c *config) error {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemCerts) {
			return port.Invalidf("egress upstream roots: no PEM certificate")
		}
		c.egress.roots, c.egress.rootsPEM = pool, append([]byte(nil), pemCerts...)
		return nil
	}
}

// WithEgressUnsafeAllow exempts address ranges from the egress proxy's SSRF guard.
// It exists for tests whose upstreams listen on loopback; never use it in
// production: an allowlisted name that resolves into these ranges is dialled.
func WithEgressUnsafeAllow(prefixes ...netip.Prefix) Option {
	return func(c *config) error {
		for _, p := range prefixes {
			if !p.IsValid() {
				return port.Invalidf("egress unsafe allow: invalid prefix")
			}
		}
		c.egress.unsafeAllow = append(c.egress.unsafeAllow, prefixes...)
		return nil
	}
}

// WithEgressUpstreamProxy sends egress traffic through an http:// proxy by default
// (a run's EgressPolicy.UpstreamProxy beats it). The process's proxy variables are
// never used.
func WithEgressUpstreamProxy(proxyURL string) Option {
	return func(c *config) error {
		u, err := egress.ParseUpstreamProxy(proxyURL)
		if err != nil {
			return err
		}
		c.egress.upstreamProxy = u
		return nil
	}
}

func compileEgress(p *port.EgressPolicy) (*egress.Policy, error) {
	if p == nil {
		return nil, nil
	}
	return egress.Compile(p)
}

// startEgress serves the run's egress front (internal/egress) next to the LLM
// socket, behind the same peer check and connection limits.
func (p *Proxy) startEgress(pol *egress.Policy) error {
	ec := p.m.cfg.egress
	h := egress.Host{Roots: ec.roots, RootsPEM: ec.rootsPEM, UnsafeAllow: ec.unsafeAllow, UpstreamProxy: ec.upstreamProxy}
	if ec.resolver != nil {
		h.Resolver = ec.resolver
	}
	f, err := h.StartFront(egress.FrontConfig{RunID: p.spec.RunID, Policy: pol, Dir: p.dir, Logger: p.log,
		Wrap: func(l net.Listener) net.Listener {
			if uid := p.m.cfg.sandboxUID; uid >= 0 {
				l = &peerListener{Listener: l, p: p, allowed: [2]int{uid, os.Geteuid()}}
			}
			return llmproxy.LimitListener(l, p.m.cfg.connsPerRun, p.m.conns)
		}})
	if err != nil {
		return internal("%w", err)
	}
	p.egress = f
	return nil
}

// stopEgress stops the egress front: new connections first, then tunnels.
func (p *Proxy) stopEgress(ctx context.Context) {
	if p.egress != nil {
		p.egress.Stop(ctx)
	}
}

// EgressAudit implements port.EgressAuditor: the run's egress records so far, also
// after Stop; nil without an egress policy.
func (p *Proxy) EgressAudit() []port.EgressRecord {
	if p.egress == nil {
		return nil
	}
	return p.egress.Audit()
}

// EgressSummary implements port.EgressSummarizer: how many egress records were
// written and which were summarised away; zero without an egress policy.
func (p *Proxy) EgressSummary() port.EgressSummary {
	if p.egress == nil {
		return port.EgressSummary{}
	}
	return p.egress.Summary()
}

var (
	_ port.EgressAuditor    = (*Proxy)(nil)
	_ port.EgressSummarizer = (*Proxy)(nil)
)
