package proxypolicy

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/agentsandbox/sandbox/port"
)

// Injected header names.
const (
	HeaderAuthorization     = "Authorization"
	HeaderEndUserID         = "X-Litellm-End-User-Id"
	HeaderSpendLogsMetadata = "X-Litellm-Spend-Logs-Metadata"
)

// Limits on injected values. LiteLLM's whole header block is limited to about 16 KiB.
const (
	MaxKeyLen       = 512
	MaxValueLen     = 256
	MaxMetadataJSON = 4096
)

// allowedRequest are the only client request headers a proxy forwards: what an
// SDK needs to describe its request and the API version it speaks. Everything
// else is dropped, so a header LiteLLM starts reading tomorrow (a credential, a
// session or trace id, a pass-through to the provider) never reaches it from an
// agent. The nginx template forwards the same list (ForwardedRequestHeaders).
var allowedRequest = map[string]bool{
	"Content-Type":      true,
	"Accept":            true,
	"User-Agent":        true,
	"Openai-Beta":       true,
	"Anthropic-Version": true,
	"Anthropic-Beta":    true,
}

// IsAllowedRequestHeader reports whether a client request header is forwarded
// upstream; every other one is removed (Policy.Apply).
func IsAllowedRequestHeader(name string) bool {
	return allowedRequest[http.CanonicalHeaderKey(name)]
}

// AllowedRequestHeaders lists the client request headers a proxy forwards, in
// canonical form and a fixed order.
func AllowedRequestHeaders() []string {
	return []string{"Content-Type", "Accept", "User-Agent", "Openai-Beta", "Anthropic-Version", "Anthropic-Beta"}
}

// strippedExact are credential-bearing client headers. LiteLLM takes an API key from
// several of them, so leaving any would let an agent choose whose key (and so whose
// budget) a call uses.
var strippedExact = map[string]bool{
	"Authorization":             true,
	"Proxy-Authorization":       true,
	"Api-Key":                   true,
	"X-Api-Key":                 true,
	"X-Goog-Api-Key":            true,
	"Ocp-Apim-Subscription-Key": true,
	"Cookie":                    true,
}

// IsStripped reports whether a client request header is a credential or
// attribution header (every credential header and every x-litellm-* header,
// whatever its case). Policy.Apply removes far more: every header that
// IsAllowedRequestHeader does not name. IsStripped is the check that the
// allowlist never names one of these.
func IsStripped(name string) bool {
	c := http.CanonicalHeaderKey(name)
	return strippedExact[c] || strings.HasPrefix(c, "X-Litellm-")
}

// StrippedHeaders lists the exact header names IsStripped removes (besides the
// x-litellm- prefix), for renderers of configs that must name them one by one.
func StrippedHeaders() []string {
	return []string{"Authorization", "Proxy-Authorization", "Api-Key", "X-Api-Key", "X-Goog-Api-Key", "Ocp-Apim-Subscription-Key", "Cookie"}
}

// SpendLogsMetadata is the JSON sent as x-litellm-spend-logs-metadata. LiteLLM stores it
// in the spend row's metadata.spend_logs_metadata, which is how a row is tied to a run.
type SpendLogsMetadata struct {
	RunID           string `json:"run_id"`
	Attempt         int    `json:"attempt"`
	UserID          string `json:"user_id,omitempty"`
	GraphID         string `json:"graph_id,omitempty"`
	ExistingTraceID string `json:"existing_trace_id,omitempty"`
	SessionID       string `json:"session_id,omitempty"`
	TraceUserID     string `json:"trace_user_id,omitempty"`
}

// Header is one injected header.
type Header struct{ Name, Value string }

// Policy is a validated per-run header policy.
type Policy struct {
	runID    string
	account  string
	injected []Header
}

var keyRe = regexp.MustCompile(`^[A-Za-z0-9._~+/=-]+$`)

// ValidateValue checks one attribution value: at most MaxValueLen bytes of printable
// ASCII (no CR, LF, NUL or other control characters). Errors wrap port.ErrInvalidSpec.
func ValidateValue(field, v string) error {
	if len(v) > MaxValueLen {
		return port.Invalidf("%s is %d bytes, over the limit of %d", field, len(v), MaxValueLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return port.Invalidf("%s has a control or non-ASCII byte 0x%02x at offset %d", field, c, i)
		}
	}
	return nil
}

// NewPolicy validates spec's run, key and attribution and returns the policy that
// injects them. Errors wrap port.ErrInvalidSpec.
func NewPolicy(spec port.ProxySpec) (*Policy, error) {
	if err := port.ValidateRunID(spec.RunID); err != nil {
		return nil, err
	}
	if spec.Attempt < 0 || spec.Attempt > 1_000_000 {
		return nil, port.Invalidf("attempt %d out of range", spec.Attempt)
	}
	if spec.APIKey == "" || len(spec.APIKey) > MaxKeyLen || !keyRe.MatchString(spec.APIKey) {
		return nil, port.Invalidf("api key is empty, longer than %d bytes, or has characters outside [A-Za-z0-9._~+/=-]", MaxKeyLen)
	}
	a := spec.Attribution
	if a.BillingAccountID == "" {
		return nil, port.Invalidf("billing account id is required")
	}
	for _, f := range []struct{ name, v string }{
		{"billing account id", a.BillingAccountID}, {"user id", a.UserID}, {"graph id", a.GraphID},
		{"existing trace id", a.ExistingTraceID}, {"session id", a.SessionID}, {"trace user id", a.TraceUserID},
	} {
		if err := ValidateValue(f.name, f.v); err != nil {
			return nil, err
		}
	}
	md, err := json.Marshal(SpendLogsMetadata{
		RunID: spec.RunID, Attempt: spec.Attempt, UserID: a.UserID, GraphID: a.GraphID,
		ExistingTraceID: a.ExistingTraceID, SessionID: a.SessionID, TraceUserID: a.TraceUserID,
	})
	if err != nil {
		return nil, port.Invalidf("metadata: %v", err)
	}
	if len(md) > MaxMetadataJSON {
		return nil, port.Invalidf("spend logs metadata is %d bytes, over the limit of %d", len(md), MaxMetadataJSON)
	}
	return &Policy{
		runID: spec.RunID, account: a.BillingAccountID,
		injected: []Header{
			{HeaderAuthorization, "Bearer " + spec.APIKey},
			{HeaderEndUserID, a.BillingAccountID},
			{HeaderSpendLogsMetadata, string(md)},
		},
	}, nil
}

// RunID is the run the policy attributes calls to.
func (p *Policy) RunID() string { return p.runID }

// BillingAccount is the account the policy bills calls to (the injected end
// user), which proxies also write into a body's "user".
func (p *Policy) BillingAccount() string { return p.account }

// Injected returns the headers the proxy sets on every upstream request, in a fixed
// order. The Authorization value holds the key: never log it.
func (p *Policy) Injected() []Header { return append([]Header(nil), p.injected...) }

// Apply removes every client header IsAllowedRequestHeader does not name from h
// and sets the injected ones.
func (p *Policy) Apply(h http.Header) {
	for name := range h {
		if !IsAllowedRequestHeader(name) {
			delete(h, name)
		}
	}
	for _, ih := range p.injected {
		h[ih.Name] = []string{ih.Value}
	}
}

// responseHeaders is the allowlist of upstream response headers a sandbox sees, one
// table for every front (the Go fronts through IsResponseHeaderAllowed, the nginx
// proxies through a header filter rendered from ResponseHeaders): what an SDK needs
// to read an answer (its type, length and encoding) and to back off (Retry-After,
// and OpenAI's Retry-After-Ms), and LiteLLM's id, cost and deployment of the call,
// which an agent may log or show. Every other header is withheld: LiteLLM's
// x-ratelimit-* (the shared key's live quota, so every tenant's use), the
// provider's headers it relays as llm_provider-* (organisation, account limits),
// its x-litellm-* headers about the key and the deployment (spend, budget, base
// URLs), and whatever an upstream adds next. The transport's own headers (Date,
// Connection, Transfer-Encoding, Server) are the proxy's, not the upstream's.
var responseHeaders = []string{
	"Content-Type", "Content-Length", "Content-Encoding",
	"Retry-After", "Retry-After-Ms",
	"X-Litellm-Call-Id", "X-Litellm-Response-Cost", "X-Litellm-Model-Id", "X-Litellm-Model-Group",
}

var responseAllowed = func() map[string]bool {
	m := map[string]bool{}
	for _, h := range responseHeaders {
		if http.CanonicalHeaderKey(h) != h {
			panic("proxypolicy: response header " + h + " is not canonical")
		}
		m[h] = true
	}
	return m
}()

// ResponseHeaders returns the allowlist of upstream response headers a sandbox sees
// (canonical names; see IsResponseHeaderAllowed).
func ResponseHeaders() []string { return slices.Clone(responseHeaders) }

// IsResponseHeaderAllowed reports whether an upstream response header reaches the
// sandbox: only the names ResponseHeaders lists do.
func IsResponseHeaderAllowed(name string) bool { return responseAllowed[http.CanonicalHeaderKey(name)] }

// IsResponseHeaderHidden reports whether an upstream response header is withheld from
// the sandbox: every header IsResponseHeaderAllowed does not allow.
func IsResponseHeaderHidden(name string) bool { return !IsResponseHeaderAllowed(name) }
