package port

import (
	"context"
	"time"
)

// ProxyManager starts per-run LLM proxies. A proxy listens on a unix socket that only its
// run's sandbox can reach, forwards /v1/ requests to the upstream (LiteLLM), strips every
// client Authorization and x-litellm-* header, injects the credentials and attribution of
// the ProxySpec, and writes an audit record per call that the sandbox cannot touch.
//
// Start validates spec (errors wrap ErrInvalidSpec; nothing is created) and returns once
// the socket accepts connections; a proxy that does not become ready in time gives an
// error wrapping ErrUnavailable that carries the proxy's last log lines.
type ProxyManager interface {
	Start(ctx context.Context, spec ProxySpec) (Proxy, error)
}

// Proxy is one running per-run proxy.
type Proxy interface {
	// Socket says how the runner mounts the proxy's socket directory.
	Socket() LLMSocket
	// Stop stops the proxy, deletes its key-bearing configuration and returns the audit
	// records of every call it saw, also after a failed run (those calls are billable).
	// Stop is idempotent; a second call returns the same records.
	Stop(ctx context.Context) ([]AuditRecord, error)
}

// ProxySpec configures one per-run proxy.
type ProxySpec struct {
	// RunID identifies the run (ValidateRunID).
	RunID string
	// Attempt numbers retries of the same run, from 0.
	Attempt int
	// Upstream is the LiteLLM base URL, e.g. "http://127.0.0.1:4000".
	Upstream string
	// APIKey is sent upstream as "Authorization: Bearer <APIKey>". It never reaches the sandbox.
	APIKey string
	// Deadline, if set, is when the proxy ends itself even if the host that started
	// it is gone (killed before Stop): a per-run proxy outlives neither its run nor
	// this. The facade sets it to the run's time limit plus a grace. A manager that
	// cannot enforce it without its host documents so.
	Deadline time.Time
	// Attribution is injected as x-litellm-end-user-id and x-litellm-spend-logs-metadata.
	Attribution Attribution
	// Budget caps the run's LLM use; zero fields mean unlimited. Adapters that cannot
	// enforce a field refuse the spec with ErrUnsupported.
	Budget Budget
	// RequireAttestation makes the proxy refuse every LLM call until the run's bridge
	// has reported an Attestation without Violations. Adapters that cannot receive one
	// refuse the spec with ErrUnsupported. The proxy keeps one report, and only one
	// that carries the run's attestation key (LLMSocket.AttestKey), which the runner
	// hands to its own bridge alone: never combine it with an image that brings its
	// own bridge (RunSpec.OwnBridge), which the facade refuses with ErrInvalidSpec.
	RequireAttestation bool
	// Labels are extra labels for created resources; the LabelPrefix namespace is reserved.
	Labels map[string]string
	// Egress, if set, gives the run allowlisted web access through an egress proxy
	// in the same socket directory (see EgressPolicy). Adapters that cannot serve it
	// refuse the spec with ErrUnsupported. Nil: no egress, the behaviour without it.
	Egress *EgressPolicy
}

// Attribution is the billing and tracing identity the proxy injects on every call.
type Attribution struct {
	// BillingAccountID becomes x-litellm-end-user-id (LiteLLM's end_user).
	BillingAccountID string
	// The rest become x-litellm-spend-logs-metadata, with run_id and attempt from the spec.
	UserID          string
	GraphID         string
	ExistingTraceID string
	SessionID       string
	TraceUserID     string
}

// Budget limits a run's LLM use inside the proxy.
type Budget struct {
	// MaxCalls is the number of upstream calls allowed; call MaxCalls+1 gets HTTP 429
	// with a JSON error and never reaches the upstream.
	MaxCalls int
	// MaxTokens stops further calls once the total tokens reported in responses' usage
	// reach it. The engine's proxies (in-process, shared daemon, billing router)
	// reserve each call's worst case before forwarding it: its prompt bound (one
	// token per byte of the forwarded body, plus what the providers document
	// billing for its tools: a tool-use system prompt of 530 tokens on a call with
	// any tool or function, and 245, 700 and 1,234 more for Anthropic's bash, text
	// editor and computer use tools) plus n (or best_of, at most 128) times its
	// output cap, which the proxy writes into the body (max_tokens and its kin:
	// the call's own, lowered to what the budget has left, or a default when it
	// names none). A call is admitted while the budget has tokens left, so
	// whatever the concurrency, the tokens charged stay within MaxTokens plus one
	// call's excess, which is at most that call's prompt bound plus its choices
	// (so at most the proxy's request size limit plus 128 plus its tools'
	// overhead). Tools the provider runs itself (web search, web fetch, code
	// execution, file search, MCP, ...) bill their results as input no request
	// field bounds: under a token budget a call offering one, or a tool type not
	// known to the proxy, is refused (HTTP 400, "body_policy: ..."). Inputs whose
	// tokens their bytes do not bound (images, audio, files by URL or id) make a
	// call reserve all that is left, so it runs alone and only its own usage can
	// exceed. Every call is charged the usage its response reports, even beyond
	// its reservation, and one that reports none is charged its reservation; the
	// bound assumes an upstream that bills within the output cap it was given
	// (calls in flight while one bills past its cap can each exceed).
	MaxTokens int64
}

// AuditRecord is the proxy's record of one call. It never holds prompts or completions.
type AuditRecord struct {
	Time      time.Time `json:"time"`
	RunID     string    `json:"run_id"`
	Attempt   int       `json:"attempt"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Status    int       `json:"status"`
	ReqBytes  int64     `json:"req_bytes"`
	RespBytes int64     `json:"resp_bytes"`
	Model     string    `json:"model,omitempty"`
	Streamed  bool      `json:"streamed,omitempty"`
	// CallID is the upstream's x-litellm-call-id response header.
	CallID string `json:"call_id,omitempty"`
	// RequestID is the response body's id (LiteLLM's spend-log request_id), where the
	// proxy can see it.
	RequestID string `json:"request_id,omitempty"`
	// ResponseCost is the upstream's x-litellm-response-cost header, verbatim.
	ResponseCost string `json:"response_cost,omitempty"`
	// Latency is the whole call; TTFB the time to the first response byte.
	Latency time.Duration `json:"latency_ns"`
	TTFB    time.Duration `json:"ttfb_ns,omitempty"`
	// Blocked is set when the proxy refused the call itself (budget, bad path).
	Blocked string `json:"blocked,omitempty"`
	// Error describes a transport failure (upstream unreachable, stream cut).
	Error string `json:"error,omitempty"`
}
