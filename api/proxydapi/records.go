package proxydapi

import "time"

// The admin API's own forms of what the host's port package also describes: a run's
// attribution, budget and egress policy (in RegisterRequest) and the records it
// returns. Their JSON is the wire (testdata/wire.golden.json pins it); the two ends
// convert to and from their Go types (port's) at their edge, so a change of the
// host's types is not a change of the wire.

// Attribution is who a run's calls are billed to: BillingAccountID becomes
// x-litellm-end-user-id, the rest x-litellm-spend-logs-metadata.
type Attribution struct {
	BillingAccountID string
	UserID           string
	GraphID          string
	ExistingTraceID  string
	SessionID        string
	TraceUserID      string
}

// Budget caps a run's upstream calls and the tokens they report (zero: no cap).
type Budget struct {
	MaxCalls  int
	MaxTokens int64
}

// EgressPolicy is a run's web access: the allowed providers and the byte caps (zero:
// the daemon's defaults). The credential values travel beside it
// (EgressRegistration.Credentials).
type EgressPolicy struct {
	Providers                      []EgressProvider
	MaxRequestBytes                int64
	MaxRunBytes                    int64
	ResponseLimit, ResponseCeiling int64
	UpstreamProxy                  string
}

// EgressProvider is one allowed destination: its URL prefixes, the credential names
// the proxy may resolve for it and where each may be substituted.
type EgressProvider struct {
	ID          string
	URIs        []string
	Credentials []string
	Placements  map[string]CredentialPlacement `json:",omitempty"`
	TunnelOnly  bool
}

// CredentialPlacement is where one credential may be substituted.
type CredentialPlacement struct {
	Headers []string `json:",omitempty"`
	Path    bool     `json:",omitempty"`
	Query   bool     `json:",omitempty"`
	Body    bool     `json:",omitempty"`
}

// AuditRecord is one LLM call of a run as the daemon's proxy saw it.
type AuditRecord struct {
	Time         time.Time     `json:"time"`
	RunID        string        `json:"run_id"`
	Attempt      int           `json:"attempt"`
	Method       string        `json:"method"`
	Path         string        `json:"path"`
	Status       int           `json:"status"`
	ReqBytes     int64         `json:"req_bytes"`
	RespBytes    int64         `json:"resp_bytes"`
	Model        string        `json:"model,omitempty"`
	Streamed     bool          `json:"streamed,omitempty"`
	CallID       string        `json:"call_id,omitempty"`
	RequestID    string        `json:"request_id,omitempty"`
	ResponseCost string        `json:"response_cost,omitempty"`
	Latency      time.Duration `json:"latency_ns"`
	TTFB         time.Duration `json:"ttfb_ns,omitempty"`
	Blocked      string        `json:"blocked,omitempty"`
	Error        string        `json:"error,omitempty"`
}

// EgressRecord is one egress request of a run (credential names only, never values).
type EgressRecord struct {
	Time        time.Time     `json:"time"`
	RunID       string        `json:"run_id"`
	Provider    string        `json:"provider,omitempty"`
	Mode        string        `json:"mode"`
	Method      string        `json:"method"`
	Scheme      string        `json:"scheme"`
	Host        string        `json:"host"`
	Path        string        `json:"path,omitempty"`
	Status      int           `json:"status"`
	ReqBytes    int64         `json:"req_bytes"`
	RespBytes   int64         `json:"resp_bytes"`
	Latency     time.Duration `json:"latency_ns"`
	Guard       string        `json:"guard,omitempty"`
	Truncated   bool          `json:"truncated,omitempty"`
	Reflected   int           `json:"reflected,omitempty"`
	Error       string        `json:"error,omitempty"`
	Credentials []string      `json:"credentials,omitempty"`
}

// EgressSummary counts a run's egress records: written, returned, and those not kept,
// per guard.
type EgressSummary struct {
	Records    int            `json:"records"`
	Kept       int            `json:"kept"`
	Summarised map[string]int `json:"summarised,omitempty"`
}
