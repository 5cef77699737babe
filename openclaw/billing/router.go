package billing

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/internal/inert"
	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// TokenHeader carries a run token for gateways that can send per-session headers
// (the original system's patched fork, through its outboundHeaders). The router
// removes it before forwarding. Upstream OpenClaw cannot send it; there the token
// travels in the provider's base URL path instead (see Registration.BaseURL).
const TokenHeader = "X-Agentsandbox-Run-Token"

// tokenPathPrefix starts every per-run path: /r/<token>/v1/...
const tokenPathPrefix = "/r/"

// Server-side limits. None bounds a body's duration: a slow model may stream for
// minutes. Headers come from the gateway on the same host, so a few seconds is plenty.
const (
	readHeaderTimeout = 5 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	// maxRefusedRecords caps the records kept of unattributed calls, so a flood
	// of bad requests cannot grow memory without bound (a run's own records are
	// capped by its llmproxy.Meter).
	maxRefusedRecords = llmproxy.MaxRefusedRecords
)

// Run is what a run registers with the Router: who pays for its calls and how many
// it may make.
type Run struct {
	// RunID identifies the run (port.ValidateRunID).
	RunID string
	// Attempt numbers retries of the same run, from 0.
	Attempt int
	// Attribution is injected on every call of the run as x-litellm-end-user-id and
	// x-litellm-spend-logs-metadata.
	Attribution port.Attribution
	// Budget caps the run's calls and tokens; zero fields mean unlimited.
	Budget port.Budget
}

// Stats counts what a Router has seen since it was created.
type Stats struct {
	// Registered is the number of runs registered now.
	Registered int
	// Unattributed counts calls refused because they carried no live run token.
	Unattributed int64
	// Fallback counts calls without a live run token that were forwarded and billed
	// to the fallback account (WithFallback).
	Fallback int64
}

// Router is a shared LLM proxy for an OpenClaw gateway that serves many runs. Each
// registered run gets an unguessable token; a call is attributed to the run whose
// token its path (/r/<token>/v1/...) or TokenHeader carries, gets that run's header
// policy (proxypolicy.Policy: client credentials and x-litellm-* stripped, the key and
// the run's attribution injected) and is recorded in that run's audit. A call
// without a live token is refused with HTTP 403 and recorded as unattributed, or,
// with WithFallback, billed to an explicit fallback account and counted apart.
//
// A Router is an http.Handler; Serve runs it on a listener. It is safe for
// concurrent use.
type Router struct {
	cfg      config
	upstream *url.URL
	apiKey   string
	log      *slog.Logger
	engine   *llmproxy.Engine
	// ownTransp is the default transport, closed on Shutdown; nil with WithTransport.
	ownTransp *http.Transport

	mu           sync.Mutex
	byToken      map[string]*Registration
	byRun        map[runKey]*Registration
	refused      []port.AuditRecord // unattributed calls
	refusedDrop  int
	unattributed int64
	fallbackN    int64
	fallback     *Registration
	srv          *http.Server
	closed       bool
}

type runKey struct {
	id      string
	attempt int
}

// NewRouter returns a Router that forwards to upstream (the LiteLLM base URL, e.g.
// "http://127.0.0.1:4000") with apiKey. It does no I/O. Errors wrap
// port.ErrInvalidSpec: a bad URL, key, option or fallback attribution.
func NewRouter(upstream, apiKey string, opts ...Option) (*Router, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, port.Invalidf("upstream %q is not an http(s) base URL without credentials, query or fragment", upstream)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	// Validate the key once with the policy's own rules, so Register cannot fail on it later.
	if _, err := proxypolicy.NewPolicy(port.ProxySpec{RunID: "key-check", APIKey: apiKey, Attribution: port.Attribution{BillingAccountID: "key-check"}}); err != nil {
		return nil, err
	}
	r := &Router{
		cfg: cfg, upstream: u, apiKey: apiKey, log: cfg.logger.With(logattr.Component, "billing.router"),
		byToken: map[string]*Registration{},
		byRun:   map[runKey]*Registration{},
	}
	if cfg.transport == nil {
		r.ownTransp = llmproxy.NewTransport()
		cfg.transport = r.ownTransp
	}
	errLog := slog.NewLogLogger(r.log.Handler(), slog.LevelDebug)
	r.engine, err = llmproxy.NewEngine(llmproxy.Config{
		Upstream: u, Transport: cfg.transport, MaxRequestBytes: cfg.maxRequestBytes,
		Logger: r.log, Rewrite: rewrite,
	})
	if err != nil {
		return nil, err
	}
	r.srv = &http.Server{
		Handler:           r,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errLog,
	}
	if fb := cfg.fallback; fb != nil {
		reg, err := r.newRegistration(*fb)
		if err != nil {
			return nil, err
		}
		reg.fallback = true
		r.fallback = reg
	}
	return r, nil
}

// Register makes a run known to the router and returns its registration, whose
// token (in Registration.BaseURL or TokenHeader) attributes calls to the run until
// Registration.Stop. Errors wrap port.ErrInvalidSpec (bad run id, attempt or
// attribution; the same run and attempt already registered) or port.ErrClosed
// (the router was shut down).
func (r *Router) Register(run Run) (*Registration, error) {
	reg, err := r.newRegistration(run)
	if err != nil {
		return nil, err
	}
	k := runKey{run.RunID, run.Attempt}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, opErr("Register", run.RunID, port.ErrClosed)
	case r.byRun[k] != nil:
		return nil, opErr("Register", run.RunID, port.Invalidf("run %q attempt %d is already registered", run.RunID, run.Attempt))
	case r.fallback != nil && r.fallback.run.RunID == run.RunID:
		return nil, opErr("Register", run.RunID, port.Invalidf("run id %q is the fallback's", run.RunID))
	}
	r.byToken[reg.token] = reg
	r.byRun[k] = reg
	r.log.Debug("billing: run registered", "run_id", run.RunID, "attempt", run.Attempt)
	return reg, nil
}

func (r *Router) newRegistration(run Run) (*Registration, error) {
	if run.Budget.MaxCalls < 0 || run.Budget.MaxTokens < 0 {
		return nil, opErr("Register", run.RunID, port.Invalidf("negative budget"))
	}
	policy, err := proxypolicy.NewPolicy(port.ProxySpec{
		RunID: run.RunID, Attempt: run.Attempt, APIKey: r.apiKey, Attribution: run.Attribution, Budget: run.Budget,
	})
	if err != nil {
		return nil, opErr("Register", run.RunID, err)
	}
	tok, err := newToken()
	if err != nil {
		return nil, opErr("Register", run.RunID, fmt.Errorf("%w: run token: %v", port.ErrInternal, err))
	}
	meter := llmproxy.NewMeter(llmproxy.MeterConfig{
		RunID: run.RunID, Attempt: run.Attempt, Policy: policy, Budget: run.Budget,
		Logger: r.log.With("run_id", run.RunID),
	})
	return &Registration{r: r, run: run, policy: policy, token: tok, meter: meter}, nil
}

// newToken returns 256 random bits, URL-safe: unguessable, and valid in a URL path.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// forget removes a registration from the lookup tables (its token stops working).
func (r *Router) forget(reg *Registration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byToken[reg.token] == reg {
		delete(r.byToken, reg.token)
		delete(r.byRun, runKey{reg.run.RunID, reg.run.Attempt})
	}
}

// Stats returns the router's counters.
func (r *Router) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{Registered: len(r.byRun), Unattributed: r.unattributed, Fallback: r.fallbackN}
}

// Unattributed returns the records of calls refused because they carried no live
// run token (at most the last 1000 are kept; Stats counts them all). Their RunID is
// empty and Blocked is "unattributed".
func (r *Router) Unattributed() []port.AuditRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]port.AuditRecord(nil), r.refused...)
}

// Fallback returns the fallback registration (WithFallback), or nil. Its audit holds
// every call that was billed to the fallback account.
func (r *Router) Fallback() *Registration { return r.fallback }

// Serve accepts connections on ln and serves them until Shutdown; it then returns
// nil. Any other error is the listener's. Serve may be called once. At most
// llmproxy.DefaultConnsTotal connections are open at once; more wait in the
// listen queue.
func (r *Router) Serve(ln net.Listener) error {
	if err := r.srv.Serve(llmproxy.LimitListener(ln, llmproxy.DefaultConnsTotal, nil)); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("billing: serve: %w", err)
	}
	return nil
}

// Shutdown stops accepting calls and waits for calls in flight until ctx ends, then
// cuts them. Registrations stay readable; new Register calls fail with port.ErrClosed.
func (r *Router) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	if r.ownTransp != nil {
		defer r.ownTransp.CloseIdleConnections()
	}
	if err := r.srv.Shutdown(ctx); err != nil {
		_ = r.srv.Close()
		return fmt.Errorf("billing: shutdown: %w", err)
	}
	return nil
}

// lookup resolves a request to its registration. It returns the path to forward
// (without the token prefix) and whether the call goes to the fallback; reg is nil
// when the call cannot be attributed. A returned registration has the call counted
// in flight: the caller must end it with Engine.Forward.
func (r *Router) lookup(req *http.Request) (reg *Registration, rest string, fallback bool) {
	p := req.URL.Path
	var pathTok string
	malformed := false
	if strings.HasPrefix(p, tokenPathPrefix) {
		tail := p[len(tokenPathPrefix):]
		if i := strings.IndexByte(tail, '/'); i >= 0 {
			pathTok, p = tail[:i], tail[i:]
		} else {
			malformed = true
		}
	}
	hdrTok := req.Header.Get(TokenHeader)
	tok := pathTok
	if tok == "" {
		tok = hdrTok
	} else if hdrTok != "" && hdrTok != pathTok {
		malformed = true // two different claims: attribute to neither
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !malformed {
		if reg := r.byToken[tok]; tok != "" && reg != nil && reg.meter.Enter() {
			return reg, p, false
		}
		// Only a call that claims nothing (or a dead token) may go to the fallback:
		// a contradictory claim is refused outright.
		if r.fallback != nil && r.fallback.meter.Enter() {
			r.fallbackN++
			return r.fallback, p, true
		}
	}
	r.unattributed++
	return nil, p, false
}

// refuseUnattributed answers and records a call no live run owns.
func (r *Router) refuseUnattributed(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	n := llmproxy.WriteError(w, http.StatusForbidden, "unattributed", "run_token: this call carries no live run token; the LLM proxy refuses calls it cannot bill to a run")
	rec := port.AuditRecord{
		Time: start.UTC(), Method: llmproxy.Clip(req.Method, 16), Path: llmproxy.Clip(inert.String(redactPath(req.URL.Path)), 256),
		Status: http.StatusForbidden, RespBytes: n, Blocked: "unattributed", Latency: time.Since(start),
	}
	// Never log the path: it may hold a (revoked or guessed) token.
	r.log.Warn("billing: refused an unattributed call", "method", rec.Method)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.refused) >= maxRefusedRecords {
		r.refusedDrop++
		return
	}
	r.refused = append(r.refused, rec)
}

// redactPath hides the token of a /r/<token>/... path: a revoked token is no secret
// any more, but a mistyped live one would be.
func redactPath(p string) string {
	if !strings.HasPrefix(p, tokenPathPrefix) {
		return p
	}
	if i := strings.IndexByte(p[len(tokenPathPrefix):], '/'); i >= 0 {
		return tokenPathPrefix + "<token>" + p[len(tokenPathPrefix)+i:]
	}
	return tokenPathPrefix + "<token>"
}

func opErr(op, runID string, err error) error {
	return &port.OpError{Op: "billing." + op, RunID: runID, Err: err}
}
