package litellm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentsandbox/sandbox/errdefs"
)

var (
	// ErrUnauthorized reports a key LiteLLM refused (HTTP 401 or 403).
	ErrUnauthorized = errors.New("litellm: unauthorized")
	// ErrMalformed reports a response that is not the JSON LiteLLM documents.
	ErrMalformed = errors.New("litellm: malformed response")
	// ErrBadRow reports a spend row with an impossible value: a spend or token
	// count that is not a finite, non-negative number (tokens: an integer). A
	// *BadRowError carries it.
	ErrBadRow = errors.New("litellm: impossible value in a spend row")
	// ErrWalkLimit reports a spend-log walk that made as many requests as it
	// was allowed without reaching its end: a spend API whose pages never end
	// or whose cursor loops. A *WalkLimitError carries it.
	ErrWalkLimit = errors.New("litellm: spend log walk over its request limit")
)

// BadRowError names a spend row with an impossible value.
type BadRowError struct {
	// RequestID and LitellmCallID name the row.
	RequestID, LitellmCallID string
	// Field is the column ("spend", "total_tokens", ...) and Value its raw JSON
	// (clipped).
	Field, Value string
}

// Error implements error.
func (e *BadRowError) Error() string {
	return fmt.Sprintf("%v: row %q (call %q): %s = %s", ErrBadRow, e.RequestID, e.LitellmCallID, e.Field, e.Value)
}

// Is matches ErrBadRow and ErrMalformed.
func (e *BadRowError) Is(target error) bool { return target == ErrBadRow || target == ErrMalformed }

// WalkLimitError is a walk stopped at its request limit.
type WalkLimitError struct {
	// Path is the endpoint walked; Requests the requests made.
	Path     string
	Requests int
}

// Error implements error.
func (e *WalkLimitError) Error() string {
	return fmt.Sprintf("%v: %s: %d requests without reaching the end of the rows", ErrWalkLimit, e.Path, e.Requests)
}

// Is matches ErrWalkLimit and ErrMalformed.
func (e *WalkLimitError) Is(target error) bool {
	return target == ErrWalkLimit || target == ErrMalformed
}

// APIError is an error response from LiteLLM. It covers both shapes LiteLLM sends:
// its own {"error":{"message","type","param","code"}} and FastAPI's {"detail":...}.
//
// errors.Is(err, ErrUnauthorized) holds for 401 and 403, errors.Is(err,
// errdefs.ErrUnavailable) for 429 and 5xx (returned only after retries), and
// errors.Is(err, errdefs.ErrNotFound) for 404.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Method and Path name the request.
	Method, Path string
	// Message is the human-readable reason: error.message, or the text of detail.
	Message string
	// Type, Param and Code are LiteLLM's error fields. Code arrives as a string
	// ("401") or, from older releases, a number; both end up here as text. LiteLLM's
	// placeholder "None" is reported as "".
	Type, Param, Code string
	// Detail is the raw JSON of a FastAPI {"detail":...} body (a string, an object or
	// a list of validation errors); nil for LiteLLM's own shape.
	Detail json.RawMessage
}

// Error implements error.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "litellm: %s %s: HTTP %d", e.Method, e.Path, e.StatusCode)
	if e.Type != "" {
		fmt.Fprintf(&b, " (%s)", e.Type)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is classifies the error against ErrUnauthorized and the errdefs sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case errdefs.ErrUnavailable:
		return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
	case errdefs.ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	}
	return false
}

// parseAPIError reads an error body of either shape; anything else is kept as text.
func parseAPIError(method, path string, status int, body []byte) *APIError {
	e := &APIError{StatusCode: status, Method: method, Path: path}
	var env struct {
		Error  json.RawMessage `json:"error"`
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &env) != nil || (len(env.Error) == 0 && len(env.Detail) == 0) {
		e.Message = snippet(body)
		return e
	}
	if len(env.Error) > 0 && !bytes.Equal(env.Error, []byte("null")) {
		var f struct {
			Message json.RawMessage `json:"message"`
			Type    json.RawMessage `json:"type"`
			Param   json.RawMessage `json:"param"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(env.Error, &f) == nil {
			e.Message, e.Type, e.Param, e.Code = text(f.Message), text(f.Type), text(f.Param), text(f.Code)
		} else {
			e.Message = text(env.Error)
		}
	}
	if len(env.Detail) > 0 {
		e.Detail = append(json.RawMessage(nil), env.Detail...)
		if e.Message == "" {
			e.Message = detailText(env.Detail)
		}
	}
	return e
}

// text renders a JSON scalar as text: strings unquoted, numbers as written, null and
// Python's "None" as "".
func text(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return ""
	}
	var s string
	if raw[0] == '"' {
		if json.Unmarshal(raw, &s) != nil {
			return snippet(raw)
		}
	} else {
		s = string(raw)
	}
	if s == "None" {
		return ""
	}
	return s
}

// detailText flattens FastAPI's detail: a string, {"error": "..."} or a list of
// validation errors ({"loc": [...], "msg": "..."}).
func detailText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		for _, k := range []string{"error", "message", "msg"} {
			if v, ok := obj[k]; ok {
				return text(v)
			}
		}
		return snippet(raw)
	}
	var list []struct {
		Loc []any  `json:"loc"`
		Msg string `json:"msg"`
	}
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
		parts := make([]string, 0, len(list))
		for _, v := range list {
			loc := make([]string, 0, len(v.Loc))
			for _, l := range v.Loc {
				loc = append(loc, fmt.Sprint(l))
			}
			parts = append(parts, strings.Join(loc, ".")+": "+v.Msg)
		}
		return strings.Join(parts, "; ")
	}
	return snippet(raw)
}

// snippet keeps the start of a body for an error message.
func snippet(b []byte) string {
	const limit = 200
	b = bytes.TrimSpace(b)
	if len(b) > limit {
		b = b[:limit]
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
		return string(b) + "..."
	}
	return string(b)
}

// unavailableError is a transport failure (connection refused, reset, timeout)
// after retries; it is both errdefs.ErrUnavailable and its cause.
type unavailableError struct {
	method, path string
	attempts     int
	err          error
}

func (e *unavailableError) Error() string {
	return "litellm: " + e.method + " " + e.path + ": unavailable after " + strconv.Itoa(e.attempts) + " attempt(s): " + e.err.Error()
}

func (e *unavailableError) Unwrap() []error { return []error{errdefs.ErrUnavailable, e.err} }

func malformed(path string, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformed, path, fmt.Sprintf(format, args...))
}
