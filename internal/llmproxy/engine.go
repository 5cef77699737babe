package llmproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/sandbox/internal/inert"
	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// Config configures an Engine. Upstream and Transport are required; the hooks are
// optional.
type Config struct {
	// Upstream is the LiteLLM base URL, without query, fragment or credentials.
	Upstream *url.URL
	// Transport reaches the upstream (NewTransport is the usual one).
	Transport http.RoundTripper
	// MaxRequestBytes bounds a request body; larger bodies get HTTP 413.
	MaxRequestBytes int64
	// TokenEstimate is the output cap a call gets under a token budget when it
	// names none (max_tokens and its kin): the proxy writes it into the body, so
	// the reservation bounds the call (see Meter). Zero means
	// DefaultTokenEstimate.
	TokenEstimate int64
	// Logger receives transport-level errors (default: discard). Call logs go to
	// the run's Meter logger.
	Logger *slog.Logger

	// Rewrite, if set, runs after the run's header policy was applied to the
	// outgoing request, for headers only one front knows about.
	Rewrite func(pr *httputil.ProxyRequest)

	// Telemetry receives a span and the GenAI metrics of every call (default:
	// the global OpenTelemetry providers).
	Telemetry *telemetry.T
}

// DefaultTokenEstimate is Config.TokenEstimate's default.
const DefaultTokenEstimate = 4096

// Engine forwards LLM calls for many runs to one upstream: it checks and routes a
// request, takes it from its run's budget, applies the run's header policy,
// forwards it unbuffered, taps the response for the audit and the token budget,
// and records the outcome in the run's Meter. Fronts differ only in how a request
// finds its Meter; they hand it to Forward. An Engine is safe for concurrent use.
//
// Like httputil.ReverseProxy, which it wraps, an Engine is customised through the
// hooks of its Config.
type Engine struct {
	cfg Config
	rp  *httputil.ReverseProxy
	tel *telemetry.T
}

// NewEngine returns an Engine. Errors wrap port.ErrInvalidSpec.
func NewEngine(cfg Config) (*Engine, error) {
	switch {
	case cfg.Upstream == nil || cfg.Upstream.Host == "":
		return nil, port.Invalidf("engine: no upstream")
	case cfg.Transport == nil:
		return nil, port.Invalidf("engine: no transport")
	case cfg.MaxRequestBytes <= 0:
		return nil, port.Invalidf("engine: max request bytes %d is not positive", cfg.MaxRequestBytes)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TokenEstimate <= 0 {
		cfg.TokenEstimate = DefaultTokenEstimate
	}
	e := &Engine{cfg: cfg, tel: telemetry.Or(cfg.Telemetry)}
	e.rp = &httputil.ReverseProxy{
		Rewrite:        e.rewrite,
		Transport:      cfg.Transport,
		FlushInterval:  -1, // flush every write: SSE chunks reach the agent as they arrive
		ModifyResponse: e.modifyResponse,
		ErrorHandler:   e.errorHandler,
		ErrorLog:       slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	return e, nil
}

// Route finds the inference route of a request path (a front's run selector
// removed): only a canonical path (CleanPath, and no percent escapes in the
// request line) on the allowlist proxypolicy.Routes, with the route's method, is
// forwarded. It returns the route and its upstream path, or the refusal.
func Route(r *http.Request, p string) (proxypolicy.Route, string, *Refusal) {
	if r.URL.RawPath != "" || !CleanPath(p) {
		return proxypolicy.Route{}, "", &NotCanonical
	}
	rt, up, ok, otherMethod := proxypolicy.RouteFor(r.Method, p)
	switch {
	case ok:
		return rt, up, nil
	case otherMethod:
		return rt, "", &Refusal{http.StatusMethodNotAllowed, "method_not_allowed", "invalid_request_error", "route_allowlist: method " + Clip(r.Method, 16) + " is not allowed on this route"}
	}
	return rt, "", &RouteNotAllowed
}

// NotCanonical refuses a path in a form upstream routers might read differently
// from the proxy: percent escapes, dot segments, doubled slashes.
var NotCanonical = Refusal{http.StatusBadRequest, "path_not_canonical", "invalid_request_error",
	"canonical_path: the LLM proxy forwards canonical paths only (no percent escapes, dot segments or doubled slashes)"}

// RouteNotAllowed refuses a path that is not an inference route.
var RouteNotAllowed = Refusal{http.StatusNotFound, "route_not_allowed", "not_found",
	"route_allowlist: the LLM proxy forwards inference routes only: " + proxypolicy.RouteList()}

// Call is the state of one request of a run, from Forward to its record.
type Call struct {
	meter    *Meter
	start    time.Time
	rec      port.AuditRecord
	route    proxypolicy.Route
	upPath   string
	resp     *ResponseTap
	upErr    error
	clientGo bool
	reserved int64  // tokens reserved and not yet charged (Meter.mu)
	charged  int64  // usage charged (Meter.mu)
	ticket   string // the front's admission of the call (MeterConfig.OnAdmit)
	// releaseBody gives back the call's body slot (idempotent); nil without a body.
	releaseBody func()
	span        trace.Span // ended by observe
}

// sentBody is a request body that gives back its slot once read to the end or
// closed by the transport.
type sentBody struct {
	*bytes.Reader
	sent func()
}

func (b *sentBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.sent()
	}
	return n, err
}

func (b *sentBody) Close() error {
	b.sent()
	return nil
}

type ctxKey struct{}

func callFrom(ctx context.Context) *Call {
	c, _ := ctx.Value(ctxKey{}).(*Call)
	return c
}

// Forward serves one request of m's run; path is the request path as the front
// resolved it (its run selector removed). The caller must have counted the call
// with m.Enter; Forward ends it, recording it in m's audit, whatever happens. A
// panic of the response writer (http.ErrAbortHandler) is recorded, then re-raised.
func (e *Engine) Forward(w http.ResponseWriter, r *http.Request, m *Meter, path string) {
	start := time.Now()
	c := &Call{meter: m, start: start, rec: port.AuditRecord{
		Time: start.UTC(), RunID: m.cfg.RunID, Attempt: m.cfg.Attempt,
		Method: Clip(r.Method, 16), Path: Clip(inert.String(path), 256),
	}}
	ctx := e.startSpan(r, c) // the request's context with the call's span
	if ref := m.attestationRefusal(); ref != nil {
		e.refuse(w, c, ref)
		return
	}
	rt, up, ref := Route(r, path)
	if ref != nil {
		e.refuse(w, c, ref)
		return
	}
	c.route, c.upPath = rt, up
	c.rec.Path = Clip(inert.String(up), 256)
	if ref := Check(r, e.cfg.MaxRequestBytes); ref != nil {
		e.refuse(w, c, ref)
		return
	}
	body, ref := e.readBody(w, r, m, c)
	if c.releaseBody != nil {
		defer c.releaseBody()
	}
	if ref != nil {
		e.refuse(w, c, ref)
		return
	}
	var pb parsedBody
	budgeted := m.cfg.Budget.MaxTokens > 0 && rt.BodyKeys != nil
	if rt.BodyKeys == nil {
		body = nil // a GET route takes no body
	} else {
		var ref *Refusal
		pb, ref = applyBodyPolicy(rt, r.Header.Get("Content-Type"), body, m.cfg.Policy.BillingAccount())
		if ref == nil && budgeted {
			ref = pb.measure(rt)
		}
		if ref != nil {
			e.refuse(w, c, ref)
			return
		}
		if len(pb.dropped) > 0 {
			m.log.Debug("llmproxy: body keys off the allowlist dropped", "path", c.rec.Path, "keys", pb.dropped)
		}
		body, c.rec.Model = pb.body, inert.String(pb.model)
	}
	res, ref := m.reserve(budgeted, pb.need, pb.maxOut, e.cfg.TokenEstimate)
	if ref != nil {
		e.refuse(w, c, ref)
		return
	}
	c.reserved = res.tokens
	if ref := m.admit(c); ref != nil {
		e.refuse(w, c, ref)
		return
	}
	if budgeted && pb.need.output {
		// The cap the reservation was made for is the one the upstream gets.
		if ref := pb.setCap(rt, res.outCap); ref != nil {
			m.unreserve(c)
			e.refuse(w, c, ref)
			return
		}
		body = pb.body
	}
	// Trailers are headers after the body: none is on the allowlist, so none
	// goes on (the body was read whole, so they have arrived and are dropped).
	r.Trailer, r.TransferEncoding = nil, nil
	if body == nil {
		r.Body, r.ContentLength = http.NoBody, 0
		if c.releaseBody != nil {
			c.releaseBody()
		}
	} else {
		r.Body, r.ContentLength = &sentBody{Reader: bytes.NewReader(body), sent: c.releaseBody}, int64(len(body))
	}
	sw := &StatusWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		e.finish(c, sw, v)
		if v != nil {
			panic(v) // http.ErrAbortHandler: the server drops the connection mid-response
		}
	}()
	e.rp.ServeHTTP(sw, r.WithContext(context.WithValue(ctx, ctxKey{}, c)))
}

// readBody reads r's body whole (it is bounded): the body policy parses it. It holds
// one of the run's body slots until the transport has sent it: c.releaseBody, set
// once a slot is taken, gives it back (the caller defers it too). No body is nil.
func (e *Engine) readBody(w http.ResponseWriter, r *http.Request, m *Meter, c *Call) ([]byte, *Refusal) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	select {
	case m.bodies <- struct{}{}:
	case <-r.Context().Done():
		return nil, &Refusal{Status: http.StatusServiceUnavailable, Blocked: "client_gone", Type: "invalid_request_error", Message: "body_policy: the client left while waiting for a body slot"}
	}
	var once sync.Once
	c.releaseBody = func() { once.Do(func() { <-m.bodies }) }
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, e.cfg.MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, TooLarge(e.cfg.MaxRequestBytes)
		}
		return nil, &Refusal{Status: http.StatusBadRequest, Blocked: "request_unreadable", Type: "invalid_request_error", Message: "body_policy: request body could not be read"}
	}
	c.rec.ReqBytes = int64(len(body))
	return body, nil
}

// rewrite is the ReverseProxy's Rewrite hook: the upstream URL and the header
// policy. ReverseProxy has already removed hop-by-hop and X-Forwarded-* headers.
func (e *Engine) rewrite(pr *httputil.ProxyRequest) {
	c := callFrom(pr.In.Context())
	// No query parameter is on any allowlist: LiteLLM reads some (team_id on
	// /v1/models, provider options elsewhere) that an agent must not choose.
	pr.Out.URL.Path, pr.Out.URL.RawPath, pr.Out.URL.RawQuery = c.upPath, "", ""
	pr.SetURL(e.cfg.Upstream)
	c.meter.cfg.Policy.Apply(pr.Out.Header)
	// The header allowlist governs trailers too: none is allowed.
	pr.Out.Trailer, pr.Out.TransferEncoding = nil, nil
	StripTrailers(pr.Out.Header)
	// Our trace context, never the agent's: LiteLLM's spans join the run's trace.
	telemetry.InjectTraceContext(pr.In.Context(), pr.Out.Header)
	if c.route.BodyKeys != nil {
		pr.Out.Header.Set("Content-Type", "application/json")
	}
	// Identity encoding keeps the response readable for the audit and the token budget.
	pr.Out.Header.Del("Accept-Encoding")
	pr.Out.Header.Del("X-Real-Ip")
	if e.cfg.Rewrite != nil {
		e.cfg.Rewrite(pr)
	}
}

// modifyResponse notes LiteLLM's headers, hides the shared key's headers and taps
// the body for the audit and the token budget.
func (e *Engine) modifyResponse(resp *http.Response) error {
	c := callFrom(resp.Request.Context())
	if c == nil {
		return nil
	}
	// The upstream's trailers are dropped by the StatusWriter (they are filled in
	// only when the body ends); the announcement goes now.
	StripTrailers(resp.Header)
	streamed := NoteResponse(resp, &c.rec)
	c.resp = NewResponseTap(resp.Body, streamed, func(n int64) { c.meter.charge(c, n) })
	resp.Body = c.resp
	return nil
}

// errorHandler answers when the upstream could not be reached or failed before
// sending response headers.
func (e *Engine) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if c := callFrom(r.Context()); c != nil {
		c.upErr = err
		c.clientGo = r.Context().Err() != nil
	}
	status, typ, msg := UpstreamFailure(err, false)
	WriteError(w, status, typ, msg)
}

// Refuse answers a request of m's run that the front refuses before Forward (a
// bad run token, a rate limit) and records it in m's audit as blocked. Like
// Forward, it needs the call counted with m.Enter and ends it.
func (e *Engine) Refuse(w http.ResponseWriter, r *http.Request, m *Meter, path string, ref *Refusal) {
	start := time.Now()
	c := &Call{meter: m, start: start, rec: port.AuditRecord{
		Time: start.UTC(), RunID: m.cfg.RunID, Attempt: m.cfg.Attempt,
		Method: Clip(r.Method, 16), Path: Clip(inert.String(path), 256),
	}}
	e.startSpan(r, c)
	e.refuse(w, c, ref)
}

// refuse answers a call that is not forwarded and records it as blocked.
func (e *Engine) refuse(w http.ResponseWriter, c *Call, ref *Refusal) {
	n := WriteRefusal(w, ref)
	c.rec.Status, c.rec.RespBytes, c.rec.Blocked = ref.Status, n, ref.Blocked
	c.rec.Latency = time.Since(c.start)
	level := slog.LevelDebug // an agent probing paths should not flood the host's logs
	if ref.Status == http.StatusTooManyRequests {
		level = slog.LevelInfo
	}
	c.meter.log.Log(context.Background(), level, "llmproxy: call refused", "path", c.rec.Path, "status", ref.Status, "blocked", ref.Blocked)
	e.observe(c, ref, GenAIUsage{})
	c.meter.leave(c.rec, false, false, c.ticket)
}

// finish completes and stores the record of a forwarded call. v is a recovered panic.
func (e *Engine) finish(c *Call, sw *StatusWriter, v any) {
	rec := &c.rec
	rec.Latency = time.Since(c.start)
	rec.Status = sw.Status
	rec.RespBytes = sw.N
	o := Outcome{Upstream: c.upErr, ClientGone: c.clientGo, Write: sw.Err, Panicked: v != nil}
	var usage GenAIUsage
	if c.resp != nil {
		c.resp.Finish(rec, c.start, &o)
		usage = c.resp.GenAI()
	}
	rec.Error = o.Error()
	c.meter.settle(c, rec.Status >= 200 && rec.Status < 300)
	e.observe(c, nil, usage)
	if rec.Error != "" {
		c.meter.log.Warn("llmproxy: call failed", "path", rec.Path, "status", rec.Status, "err", rec.Error)
	}
	c.meter.leave(*rec, true, c.route.BodyKeys != nil, c.ticket)
}
