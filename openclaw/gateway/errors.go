package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/errdefs"
)

// Sentinel errors. Everything the client returns wraps one of these (or an
// errdefs sentinel) so callers can branch with errors.Is.
var (
	// ErrClosed reports a call on, or interrupted by, a closed or dead connection.
	// It is errdefs.ErrClosed (and so port.ErrClosed), so errors.Is works with
	// any of the names.
	ErrClosed = errdefs.ErrClosed
	// ErrAuth reports a gateway that refused the credentials (wrong, missing or
	// rate-limited token). The *Error in the chain has the gateway's detail code,
	// e.g. AUTH_TOKEN_MISMATCH.
	ErrAuth = errors.New("gateway authentication failed")
	// ErrProtocolMismatch reports a gateway that speaks none of the protocol versions
	// this client supports.
	ErrProtocolMismatch = errors.New("gateway protocol mismatch")
	// ErrMalformedFrame reports a frame from the gateway that is not a protocol frame.
	ErrMalformedFrame = errors.New("malformed gateway frame")
	// ErrFrameTooLarge reports a frame over the read limit, or a request over the
	// gateway's advertised maxPayload.
	ErrFrameTooLarge = errors.New("gateway frame too large")
	// ErrLivenessTimeout reports a connection on which nothing (no tick, no frame, no
	// pong) arrived for too long; it is always wrapped in ErrClosed.
	ErrLivenessTimeout = errors.New("gateway liveness timeout")
	// ErrRunFailed reports an agent run that ended with status "error" without a
	// structured gateway error.
	ErrRunFailed = errors.New("agent run failed")
	// ErrConfigChanged reports a config write refused because the config changed
	// since the ConfigGet its base hash came from (or the hash was missing): read
	// the config again and retry. The *Error in the chain has the gateway's
	// message.
	ErrConfigChanged = errors.New("gateway config changed since it was read")
)

// Error codes the gateway puts in ErrorShape.code.
const (
	CodeInvalidRequest = "INVALID_REQUEST"
	CodeUnavailable    = "UNAVAILABLE"
	CodeAgentTimeout   = "AGENT_TIMEOUT"
	CodeForbidden      = "FORBIDDEN"
	CodeNotPaired      = "NOT_PAIRED"
	CodeNotLinked      = "NOT_LINKED"
)

// Detail codes the gateway puts in ErrorShape.details.code on connect failures.
const (
	DetailAuthTokenMismatch = "AUTH_TOKEN_MISMATCH"
	DetailAuthTokenMissing  = "AUTH_TOKEN_MISSING"
	DetailAuthRateLimited   = "AUTH_RATE_LIMITED"
	DetailProtocolMismatch  = "PROTOCOL_MISMATCH"
)

// Error is an error the gateway returned in a response frame. Retrieve it with
// errors.As. It matches ErrAuth (detail codes AUTH_*), ErrProtocolMismatch,
// ErrConfigChanged (a config write to re-read and retry),
// errdefs.ErrUnavailable (code UNAVAILABLE) and errdefs.ErrTimeout (code
// AGENT_TIMEOUT) under errors.Is.
type Error struct {
	// Method is the request method that failed, e.g. "connect" or "agent".
	Method string
	// Code is the gateway's error code, e.g. "INVALID_REQUEST" or "UNAVAILABLE".
	Code string
	// Message is the gateway's human-readable message.
	Message string
	// Details is the raw details value, if any.
	Details json.RawMessage
	// DetailCode is details.code when details is an object carrying one
	// (e.g. "AUTH_TOKEN_MISMATCH", "PROTOCOL_MISMATCH").
	DetailCode string
	// Retryable is the gateway's hint that the same request may succeed later.
	Retryable bool
	// RetryAfter is the gateway's suggested wait before retrying (0 if none).
	RetryAfter time.Duration
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("gateway")
	if e.Method != "" {
		b.WriteString(" ")
		b.WriteString(e.Method)
	}
	b.WriteString(": ")
	b.WriteString(e.Code)
	if e.DetailCode != "" {
		b.WriteString(" (")
		b.WriteString(e.DetailCode)
		b.WriteString(")")
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Retryable {
		fmt.Fprintf(&b, " (retryable after %s)", e.RetryAfter)
	}
	return b.String()
}

// Is reports whether the error belongs to one of the package (or errdefs) sentinels.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrAuth:
		return strings.HasPrefix(e.DetailCode, "AUTH_") || e.Code == CodeNotPaired
	case ErrProtocolMismatch:
		return e.DetailCode == DetailProtocolMismatch
	case ErrConfigChanged:
		// The gateway's wording for every refusal that a fresh config.get cures.
		return strings.HasPrefix(e.Method, "config.") && e.Code == CodeInvalidRequest &&
			strings.Contains(e.Message, "re-run config.get")
	case errdefs.ErrUnavailable:
		return e.Code == CodeUnavailable
	case errdefs.ErrTimeout:
		return e.Code == CodeAgentTimeout
	}
	return false
}

// newError converts a wire error shape into an *Error.
func newError(method string, s *errorShape) *Error {
	if s == nil {
		return &Error{Method: method, Code: "UNKNOWN", Message: "gateway reported failure without an error"}
	}
	e := &Error{
		Method:    method,
		Code:      s.Code,
		Message:   s.Message,
		Details:   s.Details,
		Retryable: s.Retryable,
	}
	if s.RetryAfterMs > 0 {
		e.RetryAfter = time.Duration(s.RetryAfterMs) * time.Millisecond
	}
	if len(s.Details) > 0 && s.Details[0] == '{' {
		var d struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(s.Details, &d) == nil {
			e.DetailCode = d.Code
		}
	}
	return e
}

// closedError wraps cause so that it matches ErrClosed and keeps the cause.
func closedError(cause error) error {
	if cause == nil || errors.Is(cause, ErrClosed) {
		if cause == nil {
			return ErrClosed
		}
		return cause
	}
	return fmt.Errorf("%w: %w", ErrClosed, cause)
}
