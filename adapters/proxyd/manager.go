package proxyd

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/portconv"
	"github.com/agentsandbox/sandbox/port"
)

// Manager implements port.ProxyManager on a running daemon: Start registers the
// run, the proxy's Stop deregisters it and returns its audit.
type Manager struct {
	c   *Client
	cfg config
}

var (
	_ port.ProxyManager     = (*Manager)(nil)
	_ port.Proxy            = (*Proxy)(nil)
	_ port.Attester         = (*Proxy)(nil)
	_ port.EgressAuditor    = (*Proxy)(nil)
	_ port.EgressSummarizer = (*Proxy)(nil)
)

// Option configures a Manager.
type Option func(*config) error

type config struct {
	uid    *int
	rate   *RateLimit
	grace  time.Duration
	logger *slog.Logger
}

// WithSandboxUID makes every run's socket accept only processes of uid (and the
// daemon's own uid), checked by the kernel (SO_PEERCRED), and gives uid the
// socket and token file. Without it the daemon answers its own uid only, so a
// sandbox running as another user cannot reach its proxy: set it to the
// sandbox's uid (port.DefaultUser is 1001).
func WithSandboxUID(uid int) Option {
	return func(c *config) error {
		if uid < 0 {
			return port.Invalidf("proxyd: sandbox uid %d is negative", uid)
		}
		c.uid = &uid
		return nil
	}
}

// WithRateLimit sets every run's rate limit (default: the daemon's).
func WithRateLimit(rl RateLimit) Option {
	return func(c *config) error {
		if rl.RPS < 0 || rl.Burst < 0 || rl.Streams < 0 {
			return port.Invalidf("proxyd: negative rate limit")
		}
		c.rate = &rl
		return nil
	}
}

// WithStopGrace sets how long Stop lets calls in flight finish (default 5 s).
func WithStopGrace(d time.Duration) Option {
	return func(c *config) error { return optcheck.Set(&c.grace, d, d >= 0, "proxyd: negative grace") }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { return optcheck.Set(&c.logger, l, l != nil, "proxyd: logger is nil") }
}

// NewManager returns a Manager using c. It does no I/O.
func NewManager(c *Client, opts ...Option) (*Manager, error) {
	if c == nil {
		return nil, &port.OpError{Op: "proxyd.New", Err: port.Invalidf("no client")}
	}
	cfg := config{grace: 5 * time.Second, logger: slog.New(slog.DiscardHandler)}
	if err := optcheck.Apply(&cfg, opts); err != nil {
		return nil, &port.OpError{Op: "proxyd.New", Err: err}
	}
	return &Manager{c: c, cfg: cfg}, nil
}

// Start registers the run with the daemon. Errors arrive in a *port.OpError:
// port.ErrInvalidSpec for a spec the daemon refuses (nothing is created),
// port.ErrUnavailable when the daemon cannot be reached.
func (m *Manager) Start(ctx context.Context, spec port.ProxySpec) (port.Proxy, error) {
	p, err := m.StartProxy(ctx, spec)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// StartProxy is Start returning the concrete type.
//
// With an egress policy, the credential values its providers name are resolved
// here, once, through the policy's CredentialSource, and handed to the daemon
// over the admin socket; the daemon holds them in memory for the run's life
// only (see docs/proxyd.md). A value that cannot be resolved is left out: the
// agent's request that needs it is refused as an unresolved placeholder, as
// with the in-process proxy.
func (m *Manager) StartProxy(ctx context.Context, spec port.ProxySpec) (*Proxy, error) {
	req := RegisterRequest{
		RunID: spec.RunID, Attempt: spec.Attempt, Upstream: spec.Upstream, APIKey: spec.APIKey,
		Attribution: portconv.WireAttribution(spec.Attribution), Budget: portconv.WireBudget(spec.Budget), RequireAttestation: spec.RequireAttestation,
		Labels: spec.Labels, SandboxUID: m.cfg.uid, Rate: m.cfg.rate,
	}
	if spec.Egress != nil {
		if err := spec.Egress.Validate(); err != nil {
			return nil, &port.OpError{Op: "proxyd.Start", RunID: spec.RunID, Err: err}
		}
		req.Egress = &EgressRegistration{Policy: portconv.WireEgressPolicy(*spec.Egress), Credentials: m.resolve(ctx, spec.RunID, spec.Egress)}
	}
	reg, err := m.c.Register(ctx, req)
	if err != nil {
		return nil, &port.OpError{Op: "proxyd.Start", RunID: spec.RunID, Err: err}
	}
	m.cfg.logger.Debug("proxyd: run registered", "run_id", spec.RunID, "id", reg.ID, "egress", reg.Egress)
	p := &Proxy{m: m, reg: reg}
	if spec.Egress != nil {
		p.onEgress = spec.Egress.OnAudit
	}
	return p, nil
}

// resolve fetches every credential the policy's providers name.
func (m *Manager) resolve(ctx context.Context, runID string, pol *port.EgressPolicy) []EgressCredential {
	var out []EgressCredential
	for _, pr := range pol.Providers {
		for _, name := range pr.Credentials {
			v, err := pol.Credentials.Credential(ctx, runID, pr.ID, name)
			if err != nil {
				// The error's text may come from a vault: not logged, as the
				// in-process proxy does not show it either.
				m.cfg.logger.Warn("proxyd: an egress credential could not be resolved", "run_id", runID, "provider", pr.ID, "name", name)
				continue
			}
			out = append(out, EgressCredential{Provider: pr.ID, Name: name, Value: v})
		}
	}
	return out
}

// Proxy is one run registered with the daemon.
type Proxy struct {
	m        *Manager
	reg      Registered
	onEgress func(port.EgressRecord)

	once    sync.Once
	mu      sync.Mutex // stopped, attest
	stopped bool
	audit   []port.AuditRecord
	egress  []port.EgressRecord
	// egressSum is the daemon's count of the run's egress records, after Stop.
	egressSum *port.EgressSummary
	attest    *port.Attestation
	stopErr   error
}

// Registration is what the daemon answered to the registration (socket, token).
func (p *Proxy) Registration() Registered { return p.reg }

// Socket is the run's own socket directory (runners mount it at
// port.LLMSocketDir) with the run's attestation key for the runner's bridge.
func (p *Proxy) Socket() port.LLMSocket {
	return port.LLMSocket{HostDir: p.reg.SocketDir, Egress: p.reg.Egress, AttestKey: p.reg.AttestKey}
}

// Stop deregisters the run (calls in flight get the manager's grace) and
// returns its audit. It is idempotent.
func (p *Proxy) Stop(ctx context.Context) ([]port.AuditRecord, error) {
	return p.end(ctx, p.m.cfg.grace)
}

// Abort deregisters the run at once, cutting calls in flight.
func (p *Proxy) Abort(ctx context.Context) ([]port.AuditRecord, error) { return p.end(ctx, 0) }

func (p *Proxy) end(ctx context.Context, grace time.Duration) ([]port.AuditRecord, error) {
	p.once.Do(func() {
		out, err := p.m.c.Deregister(ctx, p.reg.ID, grace)
		if err != nil {
			p.stopErr = &port.OpError{Op: "proxyd.Stop", RunID: p.reg.RunID, Err: err}
			return
		}
		att, err := portconv.Attestation(out.Attestation)
		if err != nil {
			p.stopErr = &port.OpError{Op: "proxyd.Stop", RunID: p.reg.RunID, Err: err}
		}
		p.audit = portconv.AuditRecords(out.Audit)
		egress := portconv.EgressRecords(out.Egress)
		p.mu.Lock()
		p.attest, p.egress, p.stopped = att, egress, true
		p.egressSum = portconv.EgressSummary(out.EgressSummary)
		p.mu.Unlock()
		// The daemon cannot call the host back: the policy's OnAudit gets the
		// run's egress records when it ends, not one by one.
		if p.onEgress != nil {
			for _, r := range egress {
				p.onEgress(r)
			}
		}
	})
	return append([]port.AuditRecord(nil), p.audit...), p.stopErr
}

// Audit returns the run's records stored so far.
func (p *Proxy) Audit(ctx context.Context) ([]port.AuditRecord, error) {
	page, err := p.m.c.Audit(ctx, p.reg.ID, 0)
	return portconv.AuditRecords(page.Records), err
}

// EgressSummary implements port.EgressSummarizer: how many egress records the daemon
// wrote for the run and which it summarised away; known once the run is stopped
// (zero before, and without egress).
func (p *Proxy) EgressSummary() port.EgressSummary {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.egressSum == nil {
		return port.EgressSummary{}
	}
	return *p.egressSum
}

// EgressAudit implements port.EgressAuditor: the run's egress records, from the
// daemon while the run lives (nil when it cannot be asked), and what Stop
// received after.
func (p *Proxy) EgressAudit() []port.EgressRecord {
	p.mu.Lock()
	stopped, recs := p.stopped, p.egress
	p.mu.Unlock()
	if stopped || !p.reg.Egress {
		return append([]port.EgressRecord(nil), recs...)
	}
	return askDaemon(p, "egress audit", p.m.c.EgressAudit)
}

// Attestation implements port.Attester (nil before the bridge reported, or when
// the daemon cannot be asked). After Stop it is what Stop received.
func (p *Proxy) Attestation() *port.Attestation {
	p.mu.Lock()
	stopped, a := p.stopped, p.attest
	p.mu.Unlock()
	if stopped {
		return a
	}
	return askDaemon(p, "attestation", p.m.c.Attestation)
}

// askDaemon returns what get answers for p's live run within 10 s, or the zero
// value (logged, named by what) when the daemon cannot be asked.
func askDaemon[T any](p *Proxy, what string, get func(ctx context.Context, id string) (T, error)) T {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := get(ctx, p.reg.ID)
	if err != nil {
		p.m.cfg.logger.Warn("proxyd: "+what, "run_id", p.reg.RunID, "err", err)
		var zero T
		return zero
	}
	return v
}
