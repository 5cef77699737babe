package billing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"path"
	"strconv"
	"time"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxyconf"
)

// Response headers read from LiteLLM.
const (
	headerCallID       = "X-Litellm-Call-Id"
	headerResponseCost = "X-Litellm-Response-Cost"
)

// scanLineLimit bounds one SSE line or non-streamed body kept for the audit scan
// (the response id and usage). Longer lines pass through unscanned.
const scanLineLimit = 256 << 10

// forwardPath reports whether a path (after the token prefix) may be forwarded: a
// clean /v1/... path, with no dot segments, doubled slashes, escapes or controls,
// so nothing outside /v1/ upstream can be reached by path tricks.
func forwardPath(p string) bool {
	if len(p) <= len("/v1/") || p[:4] != "/v1/" {
		return false
	}
	if c := path.Clean(p); c != p && c+"/" != p {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x21 || c == 0x7f || c == '%' || c == '\\' {
			return false
		}
	}
	return true
}

// call is the state of one forwarded request, shared with the ReverseProxy hooks
// through the request context.
type call struct {
	reg      *Registration
	fallback bool
	rest     string
	start    time.Time
	rec      port.AuditRecord
	resp     *respTap
	upErr    error
	clientGo bool
}

type ctxKey struct{}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(ctxKey{}).(*call)
	return c
}

// ServeHTTP serves /health, attributes the call to its run (refusing calls it
// cannot attribute), applies the run's policy and budget, forwards the call and
// records it in the run's audit.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/health" && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
		writeJSONStatus(w)
		return
	}
	start := time.Now()
	reg, rest, fallback := r.lookup(req)
	if reg == nil {
		r.refuseUnattributed(w, req, start)
		return
	}
	c := &call{reg: reg, fallback: fallback, rest: rest, start: start, rec: port.AuditRecord{
		Time: start.UTC(), RunID: reg.run.RunID, Attempt: reg.run.Attempt,
		Method: clip(req.Method, 16), Path: clip(rest, 256),
	}}
	if fallback {
		r.log.Warn("billing: call without a live run token billed to the fallback account", "fallback_run_id", reg.run.RunID)
	}
	switch {
	case !forwardPath(rest) || req.URL.RawPath != "":
		r.refuse(w, c, http.StatusNotFound, "path_not_allowed", "not_found", "the LLM proxy serves /v1/... only")
		return
	case req.Method != http.MethodGet && req.Method != http.MethodHead && req.Method != http.MethodPost && req.Method != http.MethodDelete:
		r.refuse(w, c, http.StatusMethodNotAllowed, "method_not_allowed", "invalid_request_error", "method "+req.Method+" is not allowed")
		return
	case req.Header.Get("Upgrade") != "":
		r.refuse(w, c, http.StatusNotImplemented, "upgrade_refused", "invalid_request_error", "protocol upgrades are not supported by the LLM proxy")
		return
	case req.ContentLength > r.cfg.maxRequestBytes:
		r.refuse(w, c, http.StatusRequestEntityTooLarge, "request_too_large", "invalid_request_error", "request body over "+strconv.FormatInt(r.cfg.maxRequestBytes, 10)+" bytes")
		return
	}
	// The body is read whole (it is bounded) so the audit can name the model.
	if req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.maxRequestBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				r.refuse(w, c, http.StatusRequestEntityTooLarge, "request_too_large", "invalid_request_error", "request body over "+strconv.FormatInt(r.cfg.maxRequestBytes, 10)+" bytes")
			} else {
				r.refuse(w, c, http.StatusBadRequest, "request_unreadable", "invalid_request_error", "request body could not be read")
			}
			return
		}
		c.rec.ReqBytes = int64(len(body))
		var m struct {
			Model string `json:"model"`
		}
		if json.Unmarshal(body, &m) == nil {
			c.rec.Model = clip(m.Model, 256)
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	if reason, msg := reg.reserve(); reason != "" {
		r.refuse(w, c, http.StatusTooManyRequests, reason, "budget_exceeded", msg)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		r.finish(c, sw, v)
		if v != nil {
			panic(v) // http.ErrAbortHandler: the server drops the connection mid-response
		}
	}()
	r.rp.ServeHTTP(sw, req.WithContext(context.WithValue(req.Context(), ctxKey{}, c)))
}

// rewrite is the ReverseProxy's Rewrite hook: the upstream URL and the run's header
// policy. ReverseProxy has already removed hop-by-hop and X-Forwarded-* headers.
func (r *Router) rewrite(pr *httputil.ProxyRequest) {
	c := callFrom(pr.In.Context())
	pr.Out.URL.Path, pr.Out.URL.RawPath = c.rest, ""
	pr.SetURL(r.upstream)
	c.reg.policy.Apply(pr.Out.Header)
	pr.Out.Header.Del(TokenHeader)
	// Identity encoding keeps the response readable for the audit and the token budget.
	pr.Out.Header.Del("Accept-Encoding")
}

// modifyResponse notes LiteLLM's headers, hides the shared key's headers and taps
// the body for the audit.
func (r *Router) modifyResponse(resp *http.Response) error {
	c := callFrom(resp.Request.Context())
	if c == nil {
		return nil
	}
	c.rec.CallID = clip(resp.Header.Get(headerCallID), 256)
	c.rec.ResponseCost = clip(resp.Header.Get(headerResponseCost), 64)
	for name := range resp.Header {
		if proxyconf.IsResponseHeaderHidden(name) {
			delete(resp.Header, name)
		}
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	c.rec.Streamed = mt == "text/event-stream"
	c.resp = &respTap{rc: resp.Body, c: c, sse: c.rec.Streamed}
	resp.Body = c.resp
	return nil
}

// errorHandler answers when the upstream could not be reached or failed before
// sending response headers.
func (r *Router) errorHandler(w http.ResponseWriter, req *http.Request, err error) {
	if c := callFrom(req.Context()); c != nil {
		c.upErr = err
		c.clientGo = req.Context().Err() != nil
	}
	writeError(w, http.StatusBadGateway, "upstream_error", "the LLM upstream could not be reached")
}

// refuse answers a call the router will not forward and records it as blocked.
func (r *Router) refuse(w http.ResponseWriter, c *call, status int, blocked, typ, msg string) {
	n := writeError(w, status, typ, msg)
	c.rec.Status, c.rec.RespBytes, c.rec.Blocked = status, n, blocked
	c.rec.Latency = time.Since(c.start)
	r.log.Debug("billing: call refused", "run_id", c.rec.RunID, "path", c.rec.Path, "status", status, "blocked", blocked)
	c.reg.leave(c.rec, false)
}

// finish completes and stores the record of a forwarded call. v is a recovered panic.
func (r *Router) finish(c *call, sw *statusWriter, v any) {
	rec := &c.rec
	rec.Latency = time.Since(c.start)
	rec.Status = sw.status
	rec.RespBytes = sw.n
	if t := c.resp; t != nil {
		t.done()
		if !t.first.IsZero() {
			rec.TTFB = t.first.Sub(c.start)
		}
		rec.RequestID = clip(t.id, 256)
	}
	switch {
	case c.upErr != nil && c.clientGo:
		rec.Error = "client went away before the upstream answered: " + c.upErr.Error()
	case c.upErr != nil:
		rec.Error = "upstream: " + c.upErr.Error()
	case c.resp != nil && c.resp.err != nil:
		rec.Error = "upstream response cut: " + c.resp.err.Error()
	case sw.werr != nil:
		rec.Error = "client went away: " + sw.werr.Error()
	case v != nil:
		rec.Error = "response aborted"
	case c.resp != nil && c.resp.errEvent != "":
		rec.Error = c.resp.errEvent
	}
	if rec.Error != "" {
		r.log.Warn("billing: call failed", "run_id", rec.RunID, "path", rec.Path, "status", rec.Status, "err", rec.Error)
	}
	c.reg.leave(*rec, true)
}

// respTap scans a response body as the ReverseProxy copies it to the client (all in
// the handler's goroutine): the response id, the reported usage (charged to the
// run's token budget as soon as it is seen) and an in-stream error.
type respTap struct {
	rc       io.ReadCloser
	c        *call
	sse      bool
	first    time.Time
	err      error
	line     []byte
	overflow bool
	id       string
	tokens   int64 // charged to the budget so far
	errEvent string
	scanned  bool
}

// Read implements io.Reader.
func (t *respTap) Read(b []byte) (int, error) {
	n, err := t.rc.Read(b)
	if n > 0 {
		if t.first.IsZero() {
			t.first = time.Now()
		}
		t.write(b[:n])
	}
	if err != nil && err != io.EOF && t.err == nil {
		t.err = err
	}
	return n, err
}

// Close implements io.Closer.
func (t *respTap) Close() error { return t.rc.Close() }

func (t *respTap) write(b []byte) {
	if !t.sse {
		t.keep(b)
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.keep(b)
			return
		}
		t.keep(b[:i])
		t.scanLine()
		b = b[i+1:]
	}
}

func (t *respTap) keep(b []byte) {
	if t.overflow || len(t.line)+len(b) > scanLineLimit {
		t.overflow = true
		return
	}
	t.line = append(t.line, b...)
}

// scanLine reads one SSE line ("data: {...}") or, for a plain response, the body.
func (t *respTap) scanLine() {
	line, overflow := bytes.TrimSpace(t.line), t.overflow
	t.line, t.overflow = t.line[:0], false
	if overflow {
		return
	}
	if t.sse {
		var ok bool
		if line, ok = bytes.CutPrefix(line, []byte("data:")); !ok {
			return
		}
		line = bytes.TrimSpace(line)
	}
	if len(line) == 0 || line[0] != '{' {
		return
	}
	var ev struct {
		ID    string `json:"id"`
		Usage *struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return
	}
	if t.id == "" {
		t.id = ev.ID
	}
	if ev.Usage != nil && ev.Usage.TotalTokens > t.tokens {
		// Usage is cumulative: charge the difference at once, before the bytes that
		// carried it reach OpenClaw, so the next call already sees the budget.
		t.c.reg.addTokens(ev.Usage.TotalTokens - t.tokens)
		t.tokens = ev.Usage.TotalTokens
	}
	if ev.Error != nil && t.errEvent == "" {
		t.errEvent = clip("upstream error: "+ev.Error.Type+": "+ev.Error.Message, 512)
	}
}

// done scans what is left once the body ended.
func (t *respTap) done() {
	if !t.scanned {
		t.scanned = true
		t.scanLine()
	}
}

// statusWriter records the status and bytes sent to the client. Unwrap lets
// http.ResponseController (used by ReverseProxy to flush) reach the real writer.
type statusWriter struct {
	http.ResponseWriter
	status int
	n      int64
	werr   error
}

// WriteHeader implements http.ResponseWriter.
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	if err != nil && w.werr == nil {
		w.werr = err
	}
	return n, err
}

// Unwrap returns the underlying ResponseWriter.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func writeJSONStatus(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}
