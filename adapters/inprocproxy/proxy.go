package inprocproxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/internal/peercred"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// Server-side timeouts. None of them bounds a request or response body: a slow model
// may stream for many minutes. Headers come from a process on the same host, so a
// few seconds is plenty; a connection that dawdles holds one of the run's slots.
const (
	readHeaderTimeout = 5 * time.Second
	idleTimeout       = 30 * time.Second
	maxHeaderBytes    = 64 << 10
	// handlerGrace bounds how long Stop waits for handlers after it cut their connections.
	handlerGrace = 5 * time.Second
)

// Proxy is one running per-run proxy. It implements port.Proxy.
type Proxy struct {
	m          *Manager
	spec       port.ProxySpec
	policy     *proxypolicy.Policy
	upstream   *url.URL
	name       string
	dir        string
	markerPath string
	created    time.Time
	log        *slog.Logger
	// attestKey is the run's attestation key: only the bridge gets it (Socket).
	attestKey string

	srv    *http.Server
	ln     *llmproxy.LimitedListener
	engine *llmproxy.Engine
	meter  *llmproxy.Meter
	served chan struct{}
	egress *egress.Front // nil without an egress policy

	mu            sync.Mutex
	rejectedPeers int

	stopOnce sync.Once
	stopErr  error
	stopped  chan struct{}
}

// newProxy makes the proxy of spec; attestKey is the run's attestation key ("":
// a fresh one).
func newProxy(m *Manager, spec port.ProxySpec, policy *proxypolicy.Policy, upstream *url.URL, name, dir, markerPath string, created time.Time, parent trace.SpanContext, attestKey string) *Proxy {
	if attestKey == "" {
		attestKey = bridgeapi.NewAttestKey()
	}
	p := &Proxy{
		m: m, spec: spec, policy: policy, upstream: upstream,
		name: name, dir: dir, markerPath: markerPath, created: created,
		log:       m.cfg.logger.With(slog.String("run_id", spec.RunID)),
		attestKey: attestKey,
		served:    make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	errLog := slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	p.meter = llmproxy.NewMeter(llmproxy.MeterConfig{RunID: spec.RunID, Attempt: spec.Attempt, Policy: policy, Budget: spec.Budget, RequireAttestation: spec.RequireAttestation, AttestKey: p.attestKey, Logger: p.log, Trace: parent})
	// The only errors are missing fields, which validate and New rule out.
	p.engine, _ = llmproxy.NewEngine(llmproxy.Config{
		Upstream: upstream, Transport: m.cfg.transport, MaxRequestBytes: m.cfg.maxRequestBytes,
		Logger: p.log, TokenEstimate: m.cfg.tokenEstimate, Telemetry: m.tel,
	})
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errLog,
	}
	return p
}

// serve starts the HTTP server on ln, under the run's and the manager's connection
// limits; peer checks wrap the listener when configured.
func (p *Proxy) serve(ln net.Listener) {
	if uid := p.m.cfg.sandboxUID; uid >= 0 {
		ln = &peerListener{Listener: ln, p: p, allowed: [2]int{uid, os.Geteuid()}}
	}
	p.ln = llmproxy.LimitListener(ln, p.m.cfg.connsPerRun, p.m.conns)
	go func() {
		defer close(p.served)
		if err := p.srv.Serve(p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("inproc: serve", slog.Any("err", err))
		}
	}()
}

// Socket says where the socket directory is on the host (runners bind-mount it at
// port.LLMSocketDir) and carries the run's attestation key for the runner's bridge.
func (p *Proxy) Socket() port.LLMSocket {
	return port.LLMSocket{HostDir: p.dir, Egress: p.egress != nil, AttestKey: p.attestKey}
}

// SocketPath is the host path of the proxy's unix socket.
func (p *Proxy) SocketPath() string { return p.dir + string(os.PathSeparator) + port.LLMSocketName }

// RunID is the run this proxy serves.
func (p *Proxy) RunID() string { return p.spec.RunID }

// Audit returns a copy of the records of the calls completed so far, in completion
// order. It is safe to call while the proxy runs, and after Stop.
func (p *Proxy) Audit() []port.AuditRecord { return p.meter.Audit() }

// AuditStats counts a proxy's calls, including those its audit only counts: past
// a cap, refused calls and forwarded calls that cannot cost anything (GET
// /v1/models) are counted, not recorded one by one. Billable calls are always
// recorded.
type AuditStats struct {
	// Records is the number of audit records kept.
	Records int
	// Forwarded and Refused count every call.
	Forwarded, Refused int
	// RefusedDropped and UnbilledDropped count calls past the caps, not recorded.
	RefusedDropped, UnbilledDropped int
	// Tokens is the usage charged to the run's token budget.
	Tokens int64
	// RejectedPeers counts connections refused by the peer check (WithSandboxUID).
	RejectedPeers int
}

// AuditStats returns the proxy's counters. Safe at any time, also after Stop.
func (p *Proxy) AuditStats() AuditStats {
	st := p.meter.Stats()
	p.mu.Lock()
	rejected := p.rejectedPeers
	p.mu.Unlock()
	return AuditStats{Records: st.Records, Forwarded: st.Forwarded, Refused: st.Refused,
		RefusedDropped: st.RefusedDropped, UnbilledDropped: st.UnbilledDropped, Tokens: st.Tokens, RejectedPeers: rejected}
}

// Stop stops accepting connections, waits for calls in flight until ctx ends (then cuts
// them; their records carry an Error), removes the per-run directory and its marker,
// and returns every audit record. It is idempotent: later calls return the same records
// and error. The error (wrapping port.ErrInternal) only reports files that could not be
// removed; a later Sweep removes them.
func (p *Proxy) Stop(ctx context.Context) ([]port.AuditRecord, error) {
	p.stopOnce.Do(func() {
		p.stopErr = p.stop(ctx)
		close(p.stopped)
	})
	return p.Audit(), p.stopErr
}

func (p *Proxy) stop(ctx context.Context) error {
	// Shutdown closes the listener (which unlinks the socket), closes idle connections
	// and waits for active ones.
	if err := p.srv.Shutdown(ctx); err != nil {
		p.log.Warn("inproc: cutting calls still in flight", slog.Any("err", err))
		_ = p.srv.Close()
	}
	<-p.served
	p.stopEgress(ctx)
	// Handlers whose connections were cut may still be recording their calls.
	graceCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handlerGrace)
	_, werr := p.meter.Stop(graceCtx)
	cancel()
	if werr != nil {
		p.log.Error("inproc: handlers did not finish after their connections were closed", slog.Any("err", werr))
	}
	p.m.forget(p.name)
	var errs []error
	if err := os.RemoveAll(p.dir); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(p.markerPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	st := p.AuditStats()
	p.log.Debug("inproc: proxy stopped", slog.Int("records", st.Records), slog.Int("refused_dropped", st.RefusedDropped),
		slog.Int("unbilled_dropped", st.UnbilledDropped), slog.Int("rejected_peers", st.RejectedPeers))
	if len(errs) > 0 {
		return opErr("Stop", p.spec.RunID, internal("remove run files: %w", errors.Join(errs...)))
	}
	return nil
}

// peerListener drops connections from processes whose uid is not allowed.
type peerListener struct {
	net.Listener
	p       *Proxy
	allowed [2]int
}

// Accept returns the next connection from an allowed peer.
func (l *peerListener) Accept() (net.Conn, error) {
	return peercred.Accept(l.Listener, peerUID,
		func(uid int) bool { return uid == l.allowed[0] || uid == l.allowed[1] },
		func(uid int, err error) {
			l.p.mu.Lock()
			l.p.rejectedPeers++
			l.p.mu.Unlock()
			l.p.log.Warn("inproc: refused a connection from a process that is not the sandbox", slog.Int("peer_uid", uid), slog.Any("err", err))
		})
}

// Ensure the peer listener still is a net.Listener after embedding changes.
var _ net.Listener = (*peerListener)(nil)

// Attestation implements port.Attester: what the run's bridge reported about its
// sandbox's isolation, nil before it did.
func (p *Proxy) Attestation() *port.Attestation { return p.meter.Attestation() }
