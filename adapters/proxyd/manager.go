package proxyd

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Manager implements port.ProxyManager on a running daemon: Start registers the
// run, the proxy's Stop deregisters it and returns its audit.
type Manager struct {
	c   *Client
	cfg config
}

var (
	_ port.ProxyManager = (*Manager)(nil)
	_ port.Proxy        = (*Proxy)(nil)
	_ port.Attester     = (*Proxy)(nil)
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
// daemon's own uid), checked by the kernel (SO_PEERCRED).
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
	return func(c *config) error {
		if d < 0 {
			return port.Invalidf("proxyd: negative grace")
		}
		c.grace = d
		return nil
	}
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return port.Invalidf("proxyd: logger is nil")
		}
		c.logger = l
		return nil
	}
}

// NewManager returns a Manager using c. It does no I/O.
func NewManager(c *Client, opts ...Option) (*Manager, error) {
	if c == nil {
		return nil, &port.OpError{Op: "proxyd.New", Err: port.Invalidf("no client")}
	}
	cfg := config{grace: 5 * time.Second, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, &port.OpError{Op: "proxyd.New", Err: err}
		}
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
func (m *Manager) StartProxy(ctx context.Context, spec port.ProxySpec) (*Proxy, error) {
	reg, err := m.c.Register(ctx, RegisterRequest{
		RunID: spec.RunID, Attempt: spec.Attempt, Upstream: spec.Upstream, APIKey: spec.APIKey,
		Attribution: spec.Attribution, Budget: spec.Budget, RequireAttestation: spec.RequireAttestation,
		Labels: spec.Labels, SandboxUID: m.cfg.uid, Rate: m.cfg.rate,
	})
	if err != nil {
		return nil, &port.OpError{Op: "proxyd.Start", RunID: spec.RunID, Err: err}
	}
	m.cfg.logger.Debug("proxyd: run registered", "run_id", spec.RunID, "id", reg.ID)
	return &Proxy{m: m, reg: reg}, nil
}

// Proxy is one run registered with the daemon.
type Proxy struct {
	m   *Manager
	reg Registered

	once    sync.Once
	mu      sync.Mutex // stopped, attest
	stopped bool
	audit   []port.AuditRecord
	attest  *port.Attestation
	stopErr error
}

// Registration is what the daemon answered to the registration (socket, token).
func (p *Proxy) Registration() Registered { return p.reg }

// Socket is the run's own socket directory; runners mount it at port.LLMSocketDir.
func (p *Proxy) Socket() port.LLMSocket { return port.LLMSocket{HostDir: p.reg.SocketDir} }

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
		p.audit = out.Audit
		p.mu.Lock()
		p.attest, p.stopped = out.Attestation, true
		p.mu.Unlock()
	})
	return append([]port.AuditRecord(nil), p.audit...), p.stopErr
}

// Audit returns the run's records stored so far.
func (p *Proxy) Audit(ctx context.Context) ([]port.AuditRecord, error) {
	page, err := p.m.c.Audit(ctx, p.reg.ID, 0)
	return page.Records, err
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := p.m.c.Attestation(ctx, p.reg.ID)
	if err != nil {
		p.m.cfg.logger.Warn("proxyd: attestation", "run_id", p.reg.RunID, "err", err)
		return nil
	}
	return a
}
