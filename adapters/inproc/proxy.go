package inproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxyconf"
)

// Server-side timeouts. None of them bounds a request or response body: a slow model
// may stream for many minutes.
const (
	readHeaderTimeout = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	// handlerGrace bounds how long Stop waits for handlers after it cut their connections.
	handlerGrace = 5 * time.Second
	// maxBlockedRecords caps stored records of refused calls, so an agent hammering the
	// proxy with bad requests cannot grow the host's memory without bound. Forwarded
	// calls are always kept: each is billable.
	maxBlockedRecords = 1000
)

// Proxy is one running per-run proxy. It implements port.Proxy.
type Proxy struct {
	m          *Manager
	spec       port.ProxySpec
	policy     *proxyconf.Policy
	upstream   *url.URL
	name       string
	dir        string
	markerPath string
	created    time.Time
	log        *slog.Logger

	srv    *http.Server
	rp     *httputil.ReverseProxy
	served chan struct{}

	mu             sync.Mutex
	records        []port.AuditRecord
	blockedKept    int
	blockedDropped int
	calls          int   // forwarded calls, for Budget.MaxCalls
	tokens         int64 // reported usage, for Budget.MaxTokens
	rejectedPeers  int
	running        int // handlers in ServeHTTP

	stopOnce sync.Once
	stopErr  error
	stopped  chan struct{}
}

func newProxy(m *Manager, spec port.ProxySpec, policy *proxyconf.Policy, upstream *url.URL, name, dir, markerPath string, created time.Time) *Proxy {
	p := &Proxy{
		m: m, spec: spec, policy: policy, upstream: upstream,
		name: name, dir: dir, markerPath: markerPath, created: created,
		log:     m.cfg.logger.With(slog.String("run_id", spec.RunID)),
		served:  make(chan struct{}),
		stopped: make(chan struct{}),
	}
	errLog := slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      m.cfg.transport,
		FlushInterval:  -1, // flush every write: SSE chunks reach the agent as they arrive
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		ErrorLog:       errLog,
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errLog,
	}
	return p
}

// serve starts the HTTP server on ln; peer checks wrap the listener when configured.
func (p *Proxy) serve(ln net.Listener) {
	if uid := p.m.cfg.sandboxUID; uid >= 0 {
		ln = &peerListener{Listener: ln, p: p, allowed: [2]int{uid, os.Geteuid()}}
	}
	go func() {
		defer close(p.served)
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("inproc: serve", slog.Any("err", err))
		}
	}()
}

// Socket says where the socket directory is on the host. Runners bind-mount it at
// port.LLMSocketDir.
func (p *Proxy) Socket() port.LLMSocket { return port.LLMSocket{HostDir: p.dir} }

// SocketPath is the host path of the proxy's unix socket.
func (p *Proxy) SocketPath() string { return p.dir + string(os.PathSeparator) + port.LLMSocketName }

// RunID is the run this proxy serves.
func (p *Proxy) RunID() string { return p.spec.RunID }

// Audit returns a copy of the records of the calls completed so far, in completion
// order. It is safe to call while the proxy runs, and after Stop.
func (p *Proxy) Audit() []port.AuditRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]port.AuditRecord(nil), p.records...)
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
	p.waitHandlers()
	p.m.forget(p.name)
	var errs []error
	if err := os.RemoveAll(p.dir); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(p.markerPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	p.mu.Lock()
	dropped, rejected, n := p.blockedDropped, p.rejectedPeers, len(p.records)
	p.mu.Unlock()
	p.log.Debug("inproc: proxy stopped", slog.Int("records", n), slog.Int("blocked_dropped", dropped), slog.Int("rejected_peers", rejected))
	if len(errs) > 0 {
		return opErr("Stop", p.spec.RunID, internal("remove run files: %w", errors.Join(errs...)))
	}
	return nil
}

// waitHandlers waits (bounded) for handlers still running after their connections were
// cut, so that their records are in the result. After a clean Shutdown there are none.
func (p *Proxy) waitHandlers() {
	deadline := time.Now().Add(handlerGrace)
	for {
		p.mu.Lock()
		n := p.running
		p.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			p.log.Error("inproc: handlers did not finish after their connections were closed", slog.Int("handlers", n))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// addTokens charges reported usage to the run's token budget.
func (p *Proxy) addTokens(n int64) {
	p.mu.Lock()
	p.tokens += n
	p.mu.Unlock()
}

// addRecord stores a finished call's record.
func (p *Proxy) addRecord(rec port.AuditRecord, forwarded bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !forwarded {
		if p.blockedKept >= maxBlockedRecords {
			p.blockedDropped++
			return
		}
		p.blockedKept++
	}
	p.records = append(p.records, rec)
}

// reserve takes one call from the budget, or says why it cannot.
func (p *Proxy) reserve() (reason, message string) {
	b := p.spec.Budget
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case b.MaxCalls > 0 && p.calls >= b.MaxCalls:
		return "budget_exceeded: max_calls", fmt.Sprintf("LLM call budget exceeded: this run may make %d calls and has used them all", b.MaxCalls)
	case b.MaxTokens > 0 && p.tokens >= b.MaxTokens:
		return "budget_exceeded: max_tokens", fmt.Sprintf("LLM token budget exceeded: this run may use %d tokens and has used %d", b.MaxTokens, p.tokens)
	}
	p.calls++
	return "", ""
}

// peerListener drops connections from processes whose uid is not allowed.
type peerListener struct {
	net.Listener
	p       *Proxy
	allowed [2]int
}

// Accept returns the next connection from an allowed peer.
func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && (uid == l.allowed[0] || uid == l.allowed[1]) {
			return c, nil
		}
		l.p.mu.Lock()
		l.p.rejectedPeers++
		l.p.mu.Unlock()
		l.p.log.Warn("inproc: refused a connection from a process that is not the sandbox", slog.Int("peer_uid", uid), slog.Any("err", err))
		_ = c.Close()
	}
}

// Ensure the peer listener still is a net.Listener after embedding changes.
var _ net.Listener = (*peerListener)(nil)

// ctxKey carries the per-call state from ServeHTTP into the ReverseProxy hooks.
type ctxKey struct{}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(ctxKey{}).(*call)
	return c
}
