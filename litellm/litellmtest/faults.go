package litellmtest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrorShape selects how an injected error body looks.
type ErrorShape int

const (
	// ShapeProxy is LiteLLM's ProxyException body:
	// {"error":{"message","type","param","code"}} with code a string.
	ShapeProxy ErrorShape = iota
	// ShapeDetail is FastAPI's HTTPException body: {"detail":{"error":"..."}}.
	ShapeDetail
	// ShapeDetailString is FastAPI's HTTPException body with a plain string:
	// {"detail":"..."}.
	ShapeDetailString
	// ShapeNumericCode is ShapeProxy with code a JSON number, as older LiteLLM
	// releases sent it.
	ShapeNumericCode
)

type fault struct {
	path       string // prefix; "" matches every path
	left       int
	status     int
	shape      ErrorShape
	malformed  bool
	retryAfter time.Duration
}

// FailNext makes the next n requests whose path starts with pathPrefix ("" for all)
// fail with status and an error body of the given shape. Faults are checked before
// authentication, in the order they were added.
func (s *Server) FailNext(pathPrefix string, n, status int, shape ErrorShape) {
	s.addFault(&fault{path: pathPrefix, left: n, status: status, shape: shape})
}

// FailNextRetryAfter is FailNext with a Retry-After header of d (whole seconds).
func (s *Server) FailNextRetryAfter(pathPrefix string, n, status int, d time.Duration) {
	s.addFault(&fault{path: pathPrefix, left: n, status: status, retryAfter: d})
}

// MalformNext makes the next n requests whose path starts with pathPrefix answer 200
// with a truncated, invalid JSON body.
func (s *Server) MalformNext(pathPrefix string, n int) {
	s.addFault(&fault{path: pathPrefix, left: n, status: http.StatusOK, malformed: true})
}

func (s *Server) addFault(f *fault) {
	if f.left <= 0 {
		return
	}
	s.mu.Lock()
	s.faults = append(s.faults, f)
	s.mu.Unlock()
}

// SetLatency delays every response by d (0 turns it off).
func (s *Server) SetLatency(d time.Duration) {
	locked(&s.mu, &s.latency, d)
}

// DropStreamAfter makes the next streamed completion close its connection after k
// chunks, without [DONE] and without writing a spend row (LiteLLM never saw the end).
func (s *Server) DropStreamAfter(k int) {
	locked(&s.mu, &s.dropAt, k)
}

// ErrorStreamAfter makes the next streamed completion send, after k chunks, an error
// event data: {"error":{...}} (status stays 200, as in LiteLLM) and end the stream.
// The spend row is written with status "failure".
func (s *Server) ErrorStreamAfter(k int) {
	locked(&s.mu, &s.errAt, k)
}

// IgnoreEndUserFilter makes /spend/logs/v2 ignore its end_user filter and return
// every user's rows, a bug seen in real deployments.
func (s *Server) IgnoreEndUserFilter(ignore bool) {
	locked(&s.mu, &s.ignoreEU, ignore)
}

// SetUnhealthy makes /health/readiness answer 503 {"detail":"Service Unhealthy (msg)"};
// "" makes it healthy again.
func (s *Server) SetUnhealthy(msg string) {
	locked(&s.mu, &s.unhealth, msg)
}

// locked sets *p to v under mu: the knobs are read by requests in flight.
func locked[T any](mu *sync.Mutex, p *T, v T) {
	mu.Lock()
	*p = v
	mu.Unlock()
}

// takeFault consumes one matching fault, if any.
func (s *Server) takeFault(path string) *fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if strings.HasPrefix(path, f.path) {
			f.left--
			if f.left <= 0 {
				s.faults = append(s.faults[:i], s.faults[i+1:]...)
			}
			c := *f
			return &c
		}
	}
	return nil
}

func (f *fault) write(w http.ResponseWriter) {
	if f.malformed {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"data":[{"request_id":"chatcmpl-trunc`))
		return
	}
	if f.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(f.retryAfter.Round(time.Second)/time.Second)))
	}
	msg := http.StatusText(f.status)
	switch f.status {
	case http.StatusUnauthorized:
		msg = "Authentication Error, Invalid proxy server token passed."
	case http.StatusForbidden:
		msg = "Authentication Error, this key is not allowed to access this route."
	}
	switch f.shape {
	case ShapeDetail:
		writeJSON(w, f.status, map[string]any{"detail": map[string]any{"error": msg}})
	case ShapeDetailString:
		writeJSON(w, f.status, map[string]any{"detail": msg})
	case ShapeNumericCode:
		writeJSON(w, f.status, map[string]any{"error": map[string]any{"message": msg, "type": errType(f.status), "param": "None", "code": f.status}})
	default:
		writeProxyError(w, f.status, msg, errType(f.status), "None")
	}
}

func errType(status int) string {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "auth_error"
	case status == http.StatusTooManyRequests:
		return "throttling_error"
	case status >= 500:
		return "internal_server_error"
	default:
		return "bad_request"
	}
}

// writeProxyError writes LiteLLM's ProxyException body; code is the status as a
// string, as LiteLLM sends it.
func writeProxyError(w http.ResponseWriter, status int, message, typ, param string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": message, "type": typ, "param": param, "code": strconv.Itoa(status),
	}})
}

// writeValidationError writes FastAPI's 422 body for a bad query parameter.
func writeValidationError(w http.ResponseWriter, typ, param, msg, input string, ctx map[string]any) {
	d := map[string]any{"type": typ, "loc": []string{"query", param}, "msg": msg, "input": input}
	if ctx != nil {
		d["ctx"] = ctx
	}
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []any{d}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
