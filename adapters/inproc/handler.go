package inproc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/port"
)

// scanLimit bounds the bytes kept per scanned JSON value (a model name, a response id,
// a usage or error object).
const scanLimit = 2048

// barePaths are OpenAI API paths that SDKs send without the /v1 prefix when their base
// URL has none. They (and their sub-paths) are forwarded as /v1/...; see the package doc.
var barePaths = []string{"/chat/completions", "/completions", "/embeddings", "/models", "/moderations", "/responses"}

// upstreamPath maps a request path to the path forwarded upstream, or reports that the
// path is not served. Paths must be clean (no dot segments, no doubled slashes, after
// percent-decoding) so that nothing outside /v1/ can be reached by path tricks.
func upstreamPath(p string) (string, bool) {
	if !llmproxy.CleanPath(p) {
		return "", false
	}
	if strings.HasPrefix(p, "/v1/") && len(p) > len("/v1/") {
		return p, true
	}
	for _, b := range barePaths {
		if p == b || strings.HasPrefix(p, b+"/") {
			return "/v1" + p, true
		}
	}
	return "", false
}

// call is the state of one proxied request, shared with the ReverseProxy hooks through
// the request context.
type call struct {
	start    time.Time
	rec      port.AuditRecord
	req      *reqTap
	resp     *respTap
	upErr    error
	clientGo bool // the client went away before the upstream answered
}

// ServeHTTP serves /health, refuses what is not allowed (with an audit record) and
// forwards the rest upstream.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.enter()
	defer p.leave()
	if r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		llmproxy.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "run_id": p.spec.RunID})
		return
	}
	start := time.Now()
	c := &call{start: start, rec: port.AuditRecord{
		Time: start.UTC(), RunID: p.spec.RunID, Attempt: p.spec.Attempt,
		Method: llmproxy.Clip(r.Method, 16), Path: llmproxy.Clip(r.URL.Path, 256),
	}}
	up, ok := upstreamPath(r.URL.Path)
	if !ok {
		p.refuse(w, c, &llmproxy.NotFound)
		return
	}
	if ref := llmproxy.Check(r, p.m.cfg.maxRequestBytes); ref != nil {
		p.refuse(w, c, ref)
		return
	}
	c.rec.Path = up
	if reason, msg := p.reserve(); reason != "" {
		p.refuse(w, c, &llmproxy.Refusal{Status: http.StatusTooManyRequests, Blocked: reason, Type: "budget_exceeded", Message: msg})
		return
	}

	if r.Body != nil && r.Body != http.NoBody {
		c.req = &reqTap{rc: http.MaxBytesReader(w, r.Body, p.m.cfg.maxRequestBytes), sc: newJSONFields(scanLimit, "model")}
		r.Body = c.req
	}
	sw := &llmproxy.StatusWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		p.finish(c, sw, v)
		if v != nil {
			panic(v) // http.ErrAbortHandler: the server drops the connection mid-response
		}
	}()
	p.rp.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), ctxKey{}, c)))
}

// enter and leave count running handlers, so Stop can wait for those it cut.
func (p *Proxy) enter() {
	p.mu.Lock()
	p.running++
	p.mu.Unlock()
}

func (p *Proxy) leave() {
	p.mu.Lock()
	p.running--
	p.mu.Unlock()
}

// rewrite is the ReverseProxy's Rewrite hook: the upstream URL and the header policy.
// ReverseProxy has already removed hop-by-hop and X-Forwarded-* headers.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	in, out := pr.In.URL, pr.Out.URL
	if up, _ := upstreamPath(in.Path); up != in.Path {
		out.Path = up
		if in.RawPath != "" {
			out.RawPath = "/v1" + in.RawPath
		}
	}
	pr.SetURL(p.upstream)
	p.policy.Apply(pr.Out.Header)
	// Identity encoding keeps the response readable for the audit and the token budget.
	pr.Out.Header.Del("Accept-Encoding")
	pr.Out.Header.Del("X-Real-Ip")
}

// modifyResponse notes LiteLLM's headers and taps the body for the audit.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	c := callFrom(resp.Request.Context())
	if c == nil {
		return nil
	}
	llmproxy.NoteResponse(resp, &c.rec)
	t := &respTap{rc: resp.Body, p: p, sc: newJSONFields(scanLimit, "id", "usage", "error")}
	if c.rec.Streamed {
		t.sse = newSSEFields(t.sc, t.onEvent)
	}
	c.resp = t
	resp.Body = t
	return nil
}

// errorHandler answers when the upstream could not be reached or failed before sending
// response headers.
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	c := callFrom(r.Context())
	if c != nil {
		c.upErr = err
		c.clientGo = r.Context().Err() != nil
	}
	status, typ, msg := llmproxy.UpstreamFailure(err, c != nil && c.req != nil && c.req.overLimit())
	llmproxy.WriteError(w, status, typ, msg)
}

// refuse answers a call the proxy will not forward and records it as blocked.
func (p *Proxy) refuse(w http.ResponseWriter, c *call, ref *llmproxy.Refusal) {
	n := llmproxy.WriteRefusal(w, ref)
	status, blocked := ref.Status, ref.Blocked
	c.rec.Status, c.rec.RespBytes, c.rec.Blocked = status, n, blocked
	c.rec.Latency = time.Since(c.start)
	level := slog.LevelDebug // an agent probing paths should not flood the host's logs
	if status == http.StatusTooManyRequests {
		level = slog.LevelInfo
	}
	p.log.Log(context.Background(), level, "inproc: call refused", "path", c.rec.Path, "status", status, "blocked", blocked)
	p.addRecord(c.rec, false)
}

// finish completes and stores the record of a forwarded call. v is a recovered panic.
func (p *Proxy) finish(c *call, sw *llmproxy.StatusWriter, v any) {
	rec := &c.rec
	rec.Latency = time.Since(c.start)
	rec.Status = sw.Status
	rec.RespBytes = sw.N
	if c.req != nil {
		rec.ReqBytes, rec.Model = c.req.result()
	}
	if t := c.resp; t != nil {
		if !t.first.IsZero() {
			rec.TTFB = t.first.Sub(c.start)
		}
		if t.sse != nil {
			t.sse.flush()
		} else {
			rec.RequestID = llmproxy.Clip(t.sc.str("id"), 256)
		}
		if rec.RequestID == "" {
			rec.RequestID = llmproxy.Clip(t.firstID, 256)
		}
	}
	o := llmproxy.Outcome{Upstream: c.upErr, ClientGone: c.clientGo, Write: sw.Err, Panicked: v != nil}
	if c.resp != nil {
		o.Response, o.StreamError = c.resp.err, c.resp.errEvent
	}
	rec.Error = o.Error()
	if rec.Error != "" {
		p.log.Warn("inproc: call failed", "path", rec.Path, "status", rec.Status, "err", rec.Error)
	}
	p.addRecord(*rec, true)
}

// reqTap counts and scans a request body as the transport reads it (from its own
// goroutine, hence the lock).
type reqTap struct {
	rc io.ReadCloser

	mu      sync.Mutex
	n       int64
	sc      *jsonFields
	tooLong bool
}

// Read implements io.Reader.
func (t *reqTap) Read(b []byte) (int, error) {
	n, err := t.rc.Read(b)
	t.mu.Lock()
	t.n += int64(n)
	t.sc.Write(b[:n])
	var mbe *http.MaxBytesError
	if err != nil && errors.As(err, &mbe) {
		t.tooLong = true
	}
	t.mu.Unlock()
	return n, err
}

// Close implements io.Closer.
func (t *reqTap) Close() error { return t.rc.Close() }

func (t *reqTap) result() (int64, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n, llmproxy.Clip(t.sc.str("model"), 256)
}

func (t *reqTap) overLimit() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tooLong
}

// respTap counts and scans a response body as the ReverseProxy copies it to the client
// (all in the handler's goroutine).
type respTap struct {
	rc        io.ReadCloser
	p         *Proxy
	sc        *jsonFields
	sse       *sseFields
	first     time.Time
	err       error
	firstID   string
	tokens    int64 // counted against the budget so far
	haveUsage bool  // a non-streamed body's usage was counted
	errEvent  string
}

// Read implements io.Reader.
func (t *respTap) Read(b []byte) (int, error) {
	n, err := t.rc.Read(b)
	if n > 0 {
		if t.first.IsZero() {
			t.first = time.Now()
		}
		if t.sse != nil {
			t.sse.Write(b[:n])
		} else {
			t.sc.Write(b[:n])
			if !t.haveUsage {
				if n, ok := t.sc.tokens(); ok {
					t.haveUsage = true
					t.count(n)
				}
			}
		}
	}
	if err != nil && err != io.EOF && t.err == nil {
		t.err = err
	}
	return n, err
}

// Close implements io.Closer.
func (t *respTap) Close() error { return t.rc.Close() }

// count makes n the call's token total and charges the difference to the run's budget
// at once, before the bytes that carried it reach the agent: an agent that waits for
// one answer before the next call cannot slip a call past MaxTokens.
func (t *respTap) count(n int64) {
	t.p.addTokens(n - t.tokens)
	t.tokens = n
}

// onEvent takes the response id from the first SSE event that has one, the last
// reported usage (usage is cumulative), and the first error event.
func (t *respTap) onEvent(sc *jsonFields) {
	if t.firstID == "" {
		t.firstID = sc.str("id")
	}
	if n, ok := sc.tokens(); ok {
		t.count(n)
	}
	if t.errEvent == "" {
		t.errEvent = sc.errorSummary()
	}
}
