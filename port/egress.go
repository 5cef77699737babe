package port

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// Egress socket and CA file names inside LLMSocketDir, and the in-sandbox forward proxy
// address the bridge exposes when a run has egress.
const (
	// EgressSocketName is the egress proxy's unix socket in a run's socket directory.
	EgressSocketName = bridgeapi.EgressSocketName
	// EgressCAName is the PEM bundle the agent trusts for TLS through the egress proxy:
	// the run's CA certificate (never its key), followed by the host's system roots
	// when they could be read.
	EgressCAName = bridgeapi.EgressCAName
	// EgressProxyAddr is where the bridge listens as an HTTP/HTTPS forward proxy;
	// agents get HTTP_PROXY=http://127.0.0.1:3128 and its kin.
	EgressProxyAddr = bridgeapi.EgressProxyAddr
)

// EgressPolicy is a run's web access: default deny, every provider lists what it may
// reach and which credentials the proxy may put into its requests. A nil policy means
// no egress at all (the run has only its LLM socket).
type EgressPolicy struct {
	// Providers are the allowed destinations. A request must match exactly one
	// provider (by scheme, host, port and path prefix); two matches are refused.
	Providers []EgressProvider
	// Credentials resolves {{name}} placeholders. It may be nil when no provider
	// names credentials. Values are fetched per request and never written anywhere.
	Credentials CredentialSource `json:"-"`
	// MaxRequestBytes caps one forward-proxy request body (and one CONNECT tunnel's
	// upload); zero means DefaultEgressMaxRequestBytes.
	MaxRequestBytes int64
	// MaxRunBytes caps the bytes a run moves through the egress proxy in both
	// directions: request and response heads (the request line, the path, every
	// header) and bodies, and every byte of a tunnel-only CONNECT; zero means
	// DefaultEgressMaxRunBytes.
	MaxRunBytes int64
	// MaxRequests caps the requests a run sends upstream (a request inside a
	// terminated tunnel counts, and so does a tunnel-only CONNECT); zero means
	// DefaultEgressMaxRequests. The next one gets 429 (guard "requests").
	MaxRequests int
	// Rate limits how fast a run may make requests of its egress proxy, refused ones
	// included (a token bucket); zero RPS means DefaultEgressRate. Over it a request
	// gets 429 with Retry-After (guard "rate").
	Rate EgressRate
	// ResponseLimit is the /proxy endpoint's default response size before truncation
	// (zero: DefaultEgressResponseLimit); a request's X-Max-Response-Size may raise it
	// up to ResponseCeiling (zero: DefaultEgressResponseCeiling).
	ResponseLimit, ResponseCeiling int64
	// UpstreamProxy, if set, is an http:// proxy every egress request goes through
	// (it beats the proxy manager's default). Process proxy variables are never used.
	UpstreamProxy string
	// OnAudit, if set, receives every egress record as it is written (live audit).
	// It is called from request goroutines and must not block for long.
	OnAudit func(EgressRecord) `json:"-"`
}

// EgressRate is a token bucket of requests: RPS requests a second on average, Burst
// at once.
type EgressRate struct {
	RPS   float64
	Burst int
}

// DefaultEgressRate is the rate of a policy that names none: enough for an agent's
// own use of APIs and documentation, far below a flood (the review's agent made
// 2,500 to 3,500 requests a second).
var DefaultEgressRate = EgressRate{RPS: 50, Burst: 200}

// Egress defaults.
const (
	DefaultEgressMaxRequests     = 20000
	DefaultEgressMaxRequestBytes = 16 << 20
	DefaultEgressMaxRunBytes     = 1 << 30
	DefaultEgressResponseLimit   = 50 << 10
	DefaultEgressResponseCeiling = 8 << 20
	maxEgressProviders           = 256
	maxEgressURIsPerProvider     = 256
	maxEgressCredsPerProvider    = 64
)

// EgressProvider is one allowed destination (an API, a docs site).
type EgressProvider struct {
	// ID names the provider in audit records, X-Provider headers and credential
	// look-ups ([A-Za-z0-9_.-], 1 to 64 characters).
	ID string
	// URIs are the allowed URL prefixes: scheme (http or https), host name (no IP
	// literals, no wildcards), optional port (default the scheme's) and optional
	// path prefix, e.g. "https://api.github.com/repos/". A path prefix ending without
	// "/" also matches itself and its sub-paths ("/v1" matches "/v1" and "/v1/x",
	// not "/v10").
	URIs []string
	// Credentials are the placeholder names ({{name}}) the proxy may resolve for
	// this provider through the policy's CredentialSource.
	Credentials []string
	// Placements says where each credential's placeholder may be substituted, by
	// credential name. A credential without an entry goes only into the headers
	// DefaultCredentialHeaders names; a placeholder anywhere else is refused (guard
	// "placeholder"), so an API that stores what it receives cannot be made to keep
	// the raw value where a later request reads it back.
	Placements map[string]CredentialPlacement `json:",omitempty"`
	// TunnelOnly makes HTTPS to this provider a plain CONNECT tunnel: no TLS
	// termination, no placeholders, no path check (only scheme, host and port).
	TunnelOnly bool
}

// DefaultCredentialHeaders are where a credential may be substituted when its
// provider gives it no CredentialPlacement.
var DefaultCredentialHeaders = []string{"Authorization"}

// CredentialPlacement is where the egress proxy may substitute one credential.
// Path, query and body are opt-in: an allowlisted API that stores what it receives
// there (a resource named after its path, a note, an issue comment) hands the raw
// value back to any later request that reads it, and the reflection guard only
// redacts responses to requests that carried the credential.
type CredentialPlacement struct {
	// Headers are the request headers (case-insensitive) whose values may carry it;
	// empty means DefaultCredentialHeaders.
	Headers []string `json:",omitempty"`
	// Path and Query allow the URL's path and query string.
	Path  bool `json:",omitempty"`
	Query bool `json:",omitempty"`
	// Body allows the request body (the request must also ask for body
	// substitution with X-Substitute-Body: true).
	Body bool `json:",omitempty"`
}

// CredentialSource gives the egress proxy credential values on demand. It is called
// once per request that needs a value (never cached beyond the request, never for a
// name the provider does not list). Errors are reported to the agent as an
// unresolved placeholder (400) naming the placeholder, never the error's text.
type CredentialSource interface {
	Credential(ctx context.Context, runID, providerID, name string) (string, error)
}

// CredentialFunc adapts a function to CredentialSource.
type CredentialFunc func(ctx context.Context, runID, providerID, name string) (string, error)

// Credential calls f.
func (f CredentialFunc) Credential(ctx context.Context, runID, providerID, name string) (string, error) {
	return f(ctx, runID, providerID, name)
}

// Egress guards: which check refused a request (EgressDenial.Guard, EgressRecord.Guard).
const (
	GuardAllowlist   = "allowlist"   // no provider allows the destination
	GuardSSRF        = "ssrf"        // the destination address is internal
	GuardScheme      = "scheme"      // not http or https (file, gopher, ...)
	GuardPort        = "port"        // the provider does not allow the port
	GuardMethod      = "method"      // a method the proxy does not forward
	GuardRequest     = "request"     // malformed request (bad target, userinfo, Host mismatch)
	GuardPlaceholder = "placeholder" // unresolved or refused placeholder
	GuardBytes       = "bytes"       // a byte cap was reached
	GuardAmbiguous   = "ambiguous"   // two providers match
	GuardEncoding    = "encoding"    // a response the reflection guard cannot read (compressed, overlong escapes)
	// GuardReflection: a response reflected part of a credential (a run of its
	// characters that is not the whole value); the response was cut and the run's
	// later requests that carry a credential are refused with this guard too.
	GuardReflection = "reflection"
	GuardRate       = "rate"     // the run's request rate is exceeded (429, Retry-After)
	GuardRequests   = "requests" // the run's request count is spent (429)
)

// EgressDenial is the proxy's refusal of one egress request. The agent receives it as
// JSON: {"error":{"type":"egress_denied","guard":...,"target":...,"message":...}}.
type EgressDenial struct {
	Status  int    `json:"-"`
	Guard   string `json:"guard"`
	Target  string `json:"target,omitempty"`
	Message string `json:"message"`
}

// Error implements error.
func (d *EgressDenial) Error() string {
	return fmt.Sprintf("egress denied (%s): %s", d.Guard, d.Message)
}

// EgressRecord is the proxy's record of one egress request. The path keeps
// placeholders in template form and redacts query values; no credential appears.
type EgressRecord struct {
	Time     time.Time `json:"time"`
	RunID    string    `json:"run_id"`
	Provider string    `json:"provider,omitempty"`
	// Mode is "proxy" (the /proxy endpoint), "forward" (absolute-form HTTP),
	// "mitm" (HTTPS terminated by the run's CA) or "tunnel" (CONNECT, opaque).
	Mode      string        `json:"mode"`
	Method    string        `json:"method"`
	Scheme    string        `json:"scheme"`
	Host      string        `json:"host"`
	Path      string        `json:"path,omitempty"`
	Status    int           `json:"status"`
	ReqBytes  int64         `json:"req_bytes"`
	RespBytes int64         `json:"resp_bytes"`
	Latency   time.Duration `json:"latency_ns"`
	// Guard is the refusing guard; empty when the request was forwarded.
	Guard string `json:"guard,omitempty"`
	// Truncated says the /proxy response was cut at its limit.
	Truncated bool `json:"truncated,omitempty"`
	// Reflected counts credential values the reflection guard replaced in the response.
	Reflected int    `json:"reflected,omitempty"`
	Error     string `json:"error,omitempty"`
	// Credentials are the placeholder names the proxy resolved into the request
	// (names only, never values).
	Credentials []string `json:"credentials,omitempty"`
}

// EgressSummary says how much of a run's egress audit was kept. Every record reaches
// EgressPolicy.OnAudit; what a run returns is bounded per class, each class keeping
// its own first and most recent records, so that a flood of one class pushes out
// nothing of another: each refusing guard (the first and last 1,000), requests that
// carried a credential ("credentialed": 5,000 and 5,000; a credentialed request
// refused by the ssrf, placeholder, reflection or encoding guard counts with its
// guard) and forwarded requests ("forwarded": the first 100,000 and the last 1,000).
// Summarised counts, per class, the records that were not kept.
type EgressSummary struct {
	// Records is how many records were written (and delivered live).
	Records int `json:"records"`
	// Kept is how many are returned.
	Kept int `json:"kept"`
	// Summarised counts the records not kept, by class (a guard, "credentialed" or
	// "forwarded").
	Summarised map[string]int `json:"summarised,omitempty"`
}

// EgressSummarizer is implemented by proxies whose egress audit is bounded: what was
// kept and what was summarised (also after Stop).
type EgressSummarizer interface {
	EgressSummary() EgressSummary
}

// EgressAuditor is implemented by proxies that serve egress: the records of every
// egress request so far (also after Stop).
type EgressAuditor interface {
	EgressAudit() []EgressRecord
}

// Validate checks the policy's shape (the proxy checks URIs in depth when it starts).
// Errors wrap ErrInvalidSpec.
func (p *EgressPolicy) Validate() error {
	if p == nil {
		return nil
	}
	if len(p.Providers) == 0 {
		return Invalidf("egress: the policy has no providers")
	}
	if len(p.Providers) > maxEgressProviders {
		return Invalidf("egress: %d providers, at most %d", len(p.Providers), maxEgressProviders)
	}
	if p.MaxRequestBytes < 0 || p.MaxRunBytes < 0 || p.ResponseLimit < 0 || p.ResponseCeiling < 0 {
		return Invalidf("egress: negative byte limit")
	}
	if p.MaxRequests < 0 || p.Rate.RPS < 0 || p.Rate.Burst < 0 {
		return Invalidf("egress: negative request limit or rate")
	}
	seen := map[string]bool{}
	for i, pr := range p.Providers {
		if !ValidEgressName(pr.ID) {
			return Invalidf("egress: provider %d: id %q is not 1-64 of [A-Za-z0-9_.-]", i, pr.ID)
		}
		if seen[pr.ID] {
			return Invalidf("egress: provider id %q appears twice", pr.ID)
		}
		seen[pr.ID] = true
		if len(pr.URIs) == 0 || len(pr.URIs) > maxEgressURIsPerProvider {
			return Invalidf("egress: provider %q: 1 to %d URIs needed", pr.ID, maxEgressURIsPerProvider)
		}
		if len(pr.Credentials) > maxEgressCredsPerProvider {
			return Invalidf("egress: provider %q: too many credentials", pr.ID)
		}
		for _, c := range pr.Credentials {
			if !ValidEgressName(c) {
				return Invalidf("egress: provider %q: credential name %q is not 1-64 of [A-Za-z0-9_.-]", pr.ID, c)
			}
		}
		if len(pr.Credentials) > 0 && p.Credentials == nil {
			return Invalidf("egress: provider %q names credentials but the policy has no CredentialSource", pr.ID)
		}
		for name, pl := range pr.Placements {
			if !slices.Contains(pr.Credentials, name) {
				return Invalidf("egress: provider %q: placement for %q, which is not one of its credentials", pr.ID, name)
			}
			for _, h := range pl.Headers {
				if !validHeaderName(h) {
					return Invalidf("egress: provider %q: credential %q: %q is not a header name", pr.ID, name, h)
				}
			}
		}
		if pr.TunnelOnly && len(pr.Credentials) > 0 {
			return Invalidf("egress: provider %q is tunnel-only: the proxy cannot inject its credentials", pr.ID)
		}
	}
	return nil
}

// validHeaderName reports an RFC 9110 token (a header field name).
func validHeaderName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ValidEgressName reports whether s can name an egress provider or credential, and
// so a {{name}} placeholder: 1 to 64 of [A-Za-z0-9_.-].
func ValidEgressName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// EgressEnv is the environment a runner sets for a run whose socket directory serves
// egress: the proxy variables (both cases) pointing at the bridge's forward proxy,
// loopback excluded, and the CA variables of common tools pointing at the run's
// bundle. Node 24 honours the proxy variables only with NODE_USE_ENV_PROXY=1. These
// variables replace the caller's of the same name: an agent must not be able to
// route around its proxy through its request's environment.
func EgressEnv() map[string]string {
	proxy := "http://" + EgressProxyAddr
	ca := LLMSocketDir + "/" + EgressCAName
	return map[string]string{
		"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
		"ALL_PROXY": proxy, "all_proxy": proxy,
		"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
		"NODE_USE_ENV_PROXY":  "1",
		"SSL_CERT_FILE":       ca,
		"NODE_EXTRA_CA_CERTS": ca,
		"REQUESTS_CA_BUNDLE":  ca,
		"CURL_CA_BUNDLE":      ca,
		"GIT_SSL_CAINFO":      ca,
	}
}
