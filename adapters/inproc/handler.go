package inproc

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/port"
)

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
	req      *llmproxy.RequestTap
	resp     *llmproxy.ResponseTap
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
		c.req = llmproxy.NewRequestTap(http.MaxBytesReader(w, r.Body, p.m.cfg.maxRequestBytes))
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
	c.resp = llmproxy.NewResponseTap(resp.Body, c.rec.Streamed, p.addTokens)
	resp.Body = c.resp
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
	status, typ, msg := llmproxy.UpstreamFailure(err, c != nil && c.req != nil && c.req.OverLimit())
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
		rec.ReqBytes, rec.Model = c.req.Result()
	}
	o := llmproxy.Outcome{Upstream: c.upErr, ClientGone: c.clientGo, Write: sw.Err, Panicked: v != nil}
	if c.resp != nil {
		c.resp.Finish(rec, c.start, &o)
	}
	rec.Error = o.Error()
	if rec.Error != "" {
		p.log.Warn("inproc: call failed", "path", rec.Path, "status", rec.Status, "err", rec.Error)
	}
	p.addRecord(*rec, true)
}
