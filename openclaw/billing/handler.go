package billing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/port"
)

// forwardPath reports whether a path (after the token prefix) may be forwarded: a
// clean /v1/... path (llmproxy.CleanPath), so nothing outside /v1/ upstream can be
// reached by path tricks.
func forwardPath(p string) bool {
	return len(p) > len("/v1/") && strings.HasPrefix(p, "/v1/") && llmproxy.CleanPath(p)
}

// call is the state of one forwarded request, shared with the ReverseProxy hooks
// through the request context.
type call struct {
	reg      *Registration
	fallback bool
	rest     string
	start    time.Time
	rec      port.AuditRecord
	resp     *llmproxy.ResponseTap
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
		Method: llmproxy.Clip(req.Method, 16), Path: llmproxy.Clip(rest, 256),
	}}
	if fallback {
		r.log.Warn("billing: call without a live run token billed to the fallback account", "fallback_run_id", reg.run.RunID)
	}
	if !forwardPath(rest) || req.URL.RawPath != "" {
		r.refuse(w, c, &llmproxy.NotFound)
		return
	}
	if ref := llmproxy.Check(req, r.cfg.maxRequestBytes); ref != nil {
		r.refuse(w, c, ref)
		return
	}
	// The body is read whole (it is bounded) so the audit can name the model.
	if req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.maxRequestBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				r.refuse(w, c, llmproxy.TooLarge(r.cfg.maxRequestBytes))
			} else {
				r.refuse(w, c, &llmproxy.Refusal{Status: http.StatusBadRequest, Blocked: "request_unreadable", Type: "invalid_request_error", Message: "request body could not be read"})
			}
			return
		}
		c.rec.ReqBytes = int64(len(body))
		var m struct {
			Model string `json:"model"`
		}
		if json.Unmarshal(body, &m) == nil {
			c.rec.Model = llmproxy.Clip(m.Model, 256)
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	if reason, msg := reg.reserve(); reason != "" {
		r.refuse(w, c, &llmproxy.Refusal{Status: http.StatusTooManyRequests, Blocked: reason, Type: "budget_exceeded", Message: msg})
		return
	}
	sw := &llmproxy.StatusWriter{ResponseWriter: w}
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
	streamed := llmproxy.NoteResponse(resp, &c.rec)
	c.resp = llmproxy.NewResponseTap(resp.Body, streamed, c.reg.addTokens)
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
	status, typ, msg := llmproxy.UpstreamFailure(err, false)
	llmproxy.WriteError(w, status, typ, msg)
}

// refuse answers a call the router will not forward and records it as blocked.
func (r *Router) refuse(w http.ResponseWriter, c *call, ref *llmproxy.Refusal) {
	n := llmproxy.WriteRefusal(w, ref)
	status, blocked := ref.Status, ref.Blocked
	c.rec.Status, c.rec.RespBytes, c.rec.Blocked = status, n, blocked
	c.rec.Latency = time.Since(c.start)
	r.log.Debug("billing: call refused", "run_id", c.rec.RunID, "path", c.rec.Path, "status", status, "blocked", blocked)
	c.reg.leave(c.rec, false)
}

// finish completes and stores the record of a forwarded call. v is a recovered panic.
func (r *Router) finish(c *call, sw *llmproxy.StatusWriter, v any) {
	rec := &c.rec
	rec.Latency = time.Since(c.start)
	rec.Status = sw.Status
	rec.RespBytes = sw.N
	o := llmproxy.Outcome{Upstream: c.upErr, ClientGone: c.clientGo, Write: sw.Err, Panicked: v != nil}
	if c.resp != nil {
		c.resp.Finish(rec, c.start, &o)
	}
	rec.Error = o.Error()
	if rec.Error != "" {
		r.log.Warn("billing: call failed", "run_id", rec.RunID, "path", rec.Path, "status", rec.Status, "err", rec.Error)
	}
	c.reg.leave(*rec, true)
}

func writeJSONStatus(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}
