// Package llmproxy is the one LLM proxy engine of the project. An Engine checks,
// routes, meters, forwards and audits calls; a Meter is one run's bookkeeping
// (budget, audit records, calls in flight, stop). Fronts differ only in how a
// request finds its run's Meter: a socket per run (adapters/inprocproxy), a token in
// the path (openclaw/billing), and next a run token on a shared socket or an
// egress request. Like httputil.ReverseProxy, which it wraps, the Engine is
// customised through hooks (Config.Route, Config.Rewrite), so what is refused,
// hidden, charged or recorded is written once. The suite in llmproxytest is run
// by every front.
package llmproxy

import (
	"encoding/json"
	"errors"
	"mime"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// Response headers LiteLLM sets that go into the audit record.
const (
	HeaderCallID       = "X-Litellm-Call-Id"
	HeaderResponseCost = "X-Litellm-Response-Cost"
)

// CleanPath reports whether p is an absolute path in the one form every router
// reads the same way: no dot segments, doubled or trailing slashes, percent
// escapes, backslashes, spaces or control characters.
func CleanPath(p string) bool {
	if p == "" || p[0] != '/' || path.Clean(p) != p {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x21 || c == 0x7f || c == '%' || c == '\\' {
			return false
		}
	}
	return true
}

// Refusal is why a request is not forwarded: the HTTP status, the audit's Blocked
// reason, and the error type and message the agent sees. Messages start with the
// name of the rule that refused the call ("route_allowlist: ...", "body_policy:
// ..."), except the budget's, whose "LLM call budget exceeded" agents and hosts
// already match on.
type Refusal struct {
	Status        int
	Blocked, Type string
	Message       string
}

// Check refuses what no LLM call needs, whatever its route: protocol upgrades,
// and a declared body over maxBody bytes (a body that lies about its length is
// cut by http.MaxBytesReader later). Methods are the route table's (Route). It
// returns nil for a request that may go on.
func Check(r *http.Request, maxBody int64) *Refusal {
	switch {
	case r.Header.Get("Upgrade") != "":
		return &Refusal{http.StatusNotImplemented, "upgrade_refused", "invalid_request_error", "no_upgrade: protocol upgrades are not supported by the LLM proxy"}
	case r.ContentLength > maxBody:
		return TooLarge(maxBody)
	}
	return nil
}

// TooLarge is the refusal of a request body over maxBody bytes.
func TooLarge(maxBody int64) *Refusal {
	return &Refusal{http.StatusRequestEntityTooLarge, "request_too_large", "invalid_request_error", "body_size: request body over " + strconv.FormatInt(maxBody, 10) + " bytes"}
}

// NoteResponse records LiteLLM's call id and response cost in rec, keeps only the
// response headers the sandbox may see (proxypolicy.IsResponseHeaderAllowed: an
// allowlist; the shared key's rate limits and spend, the provider's and the
// deployment's headers never pass), and reports whether the body is an event
// stream.
func NoteResponse(resp *http.Response, rec *port.AuditRecord) (streamed bool) {
	rec.CallID = Clip(resp.Header.Get(HeaderCallID), 256)
	rec.ResponseCost = Clip(resp.Header.Get(HeaderResponseCost), 64)
	for name := range resp.Header {
		if !proxypolicy.IsResponseHeaderAllowed(name) {
			delete(resp.Header, name)
		}
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	rec.Streamed = mt == "text/event-stream"
	return rec.Streamed
}

// Outcome is what went wrong with a forwarded call, if anything.
type Outcome struct {
	// Upstream is the error reaching the upstream before it answered.
	Upstream error
	// ClientGone reports that the client left before the upstream answered.
	ClientGone bool
	// Response is the error reading the upstream's response body.
	Response error
	// Write is the error writing to the client.
	Write error
	// Panicked reports a handler that aborted the response.
	Panicked bool
	// StreamError is an error the upstream reported inside a 200 response.
	StreamError string
}

// Error is the audit record's Error for the outcome: the first cause in the order
// of the fields, or "" for a call that went through.
func (o Outcome) Error() string {
	switch {
	case o.Upstream != nil && o.ClientGone:
		return "client went away before the upstream answered: " + o.Upstream.Error()
	case o.Upstream != nil:
		return "upstream: " + o.Upstream.Error()
	case o.Response != nil:
		return "upstream response cut: " + o.Response.Error()
	case o.Write != nil:
		return "client went away: " + o.Write.Error()
	case o.Panicked:
		return "response aborted"
	}
	return o.StreamError
}

// ErrorEvent is the audit's summary of an error the upstream reported inside a
// response: its type and code only, never its message, which may quote the prompt
// (the audit never holds prompt text).
func ErrorEvent(typ, code string) string {
	return "upstream error event (type=" + Clip(typ, 64) + ", code=" + Clip(code, 32) + ")"
}

// UpstreamFailure is the answer to a call whose upstream could not be reached:
// 413 when the cause was the request body's limit, else 502.
func UpstreamFailure(err error, bodyOverLimit bool) (status int, typ, msg string) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || bodyOverLimit {
		return http.StatusRequestEntityTooLarge, "invalid_request_error", "request body too large"
	}
	return http.StatusBadGateway, "upstream_error", "the LLM upstream could not be reached"
}

// StatusWriter records the status and bytes sent to the client. Unwrap lets
// http.ResponseController (used by httputil.ReverseProxy to flush) reach the real
// writer.
//
// It also keeps trailers and informational (1xx) answers from the client: the
// header rules govern what the upstream's response carries, and both carry
// headers outside them. Trailers arrive after the body (net/http sends
// whatever a handler adds to Header after the body, and ReverseProxy copies
// the upstream's trailers that way); none is on any allowlist, so none is
// sent: the Trailer announcement and http.TrailerPrefix keys are removed when
// the header is written, and the header map a handler sees afterwards is a
// scratch copy. A 1xx answer is not sent at all.
type StatusWriter struct {
	http.ResponseWriter
	// Status is the status sent (200 once a body is written without one).
	Status int
	// N counts the body bytes written.
	N int64
	// Err is the first write error.
	Err error

	after http.Header // the scratch header once the real one was sent
}

// Header implements http.ResponseWriter. After the header was written it is a
// scratch map: anything put there (a trailer) never reaches the client.
func (w *StatusWriter) Header() http.Header {
	if w.after != nil {
		return w.after
	}
	return w.ResponseWriter.Header()
}

// StripTrailers removes a trailer announcement and every http.TrailerPrefix key
// from h.
func StripTrailers(h http.Header) {
	h.Del("Trailer")
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			delete(h, k)
		}
	}
}

func (w *StatusWriter) sealHeader() {
	if w.after == nil {
		StripTrailers(w.ResponseWriter.Header())
		w.after = http.Header{}
	}
}

// WriteHeader implements http.ResponseWriter.
func (w *StatusWriter) WriteHeader(code int) {
	if code < 200 {
		// An upstream's informational answer (103 Early Hints): its headers would
		// pass none of the response rules (the shared key's spend, the
		// deployment), and no agent needs it. Not sent; ReverseProxy clears the
		// header map after it.
		return
	}
	if w.Status == 0 {
		w.Status = code
	}
	w.sealHeader()
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	w.sealHeader()
	n, err := w.ResponseWriter.Write(b)
	w.N += int64(n)
	if err != nil && w.Err == nil {
		w.Err = err
	}
	return n, err
}

// Unwrap returns the underlying ResponseWriter.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// apiError is the OpenAI/LiteLLM error shape, so agents' SDKs surface the message.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// WriteError answers with the OpenAI/LiteLLM error shape
// ({"error":{"message","type","param","code"}}, code the status as a string) and
// returns the body bytes written.
func WriteError(w http.ResponseWriter, status int, typ, msg string) int64 {
	return WriteJSON(w, status, apiError{Error: apiErrorBody{Message: msg, Type: typ, Code: strconv.Itoa(status)}})
}

// WriteRefusal answers with r as an error and returns the body bytes written.
func WriteRefusal(w http.ResponseWriter, r *Refusal) int64 {
	return WriteError(w, r.Status, r.Type, r.Message)
}

// WriteJSON answers with v as JSON, never cached, and returns the body bytes written.
func WriteJSON(w http.ResponseWriter, status int, v any) int64 {
	b, _ := json.Marshal(v)
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	n, _ := w.Write(b)
	return int64(n)
}

// NewTransport is the default transport to the upstream. It ignores proxy
// environment variables: the key must not travel through a proxy nobody configured
// for it. It dials with a 10 s timeout and has no ResponseHeaderTimeout: a
// non-streamed completion sends its headers only when the whole answer is ready.
// Compression is off so the taps read bodies as sent; the handlers also remove the
// client's Accept-Encoding (otherwise an agent could hide token usage from the
// budget).
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

// Clip cuts s to at most n bytes, for values from the network kept in records.
func Clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
