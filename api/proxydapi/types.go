package proxydapi

import (
	"encoding/json"
	"time"
)

// The admin API: JSON over HTTP on the daemon's unix socket (mode 0600, peers
// checked with SO_PEERCRED). Request bodies are decoded strictly: unknown fields,
// trailing data and bodies over MaxRequestBytes are refused with 400.
const (
	// PathHealth answers GET with Health.
	PathHealth = "/v1/health"
	// PathRuns takes POST RegisterRequest (answer: Registered) and GET (answer: []RunInfo).
	PathRuns = "/v1/runs"
	// MaxRequestBytes bounds an admin request body.
	MaxRequestBytes = 64 << 10
)

// A run's own paths, under PathRuns + "/" + id:
//
//	DELETE                       deregister (?grace=<duration>, default 5s; 0 cuts calls at once): DeregisterResponse
//	GET    /audit?after=<seq>    AuditPage
//	GET    /audit/stream?after=  application/x-ndjson, one AuditEntry a line, until the run ends or the client leaves
//	GET    /egress               EgressAudit (the egress records so far, held in the daemon's memory)

// RegisterRequest registers a run with the daemon.
type RegisterRequest struct {
	RunID       string      `json:"run_id"`
	Attempt     int         `json:"attempt"`
	Upstream    string      `json:"upstream"`
	APIKey      string      `json:"api_key"`
	Attribution Attribution `json:"attribution"`
	Budget      Budget      `json:"budget"`
	// RequireAttestation refuses the run's calls until its bridge attested (port.ProxySpec).
	RequireAttestation bool              `json:"require_attestation,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	// SandboxUID makes the run's socket accept that uid and the daemon's own
	// (SO_PEERCRED), and gives it the socket and the token file. Without it the
	// socket accepts the daemon's own uid only: a sandbox must be named to reach
	// its proxy.
	SandboxUID *int `json:"sandbox_uid,omitempty"`
	// Rate overrides the daemon's default per-run rate limit.
	Rate *RateLimit `json:"rate,omitempty"`
	// Network, when set, registers a sandbox on an internal network instead of
	// giving it a socket: the daemon's network listener (-listen-network) finds
	// the run by the request's source IP.
	Network *NetworkIdentity `json:"network,omitempty"`
	// Egress, when set, gives the run an egress front in its socket directory:
	// bridgeapi.EgressSocketName and bridgeapi.EgressCAName.
	Egress *EgressRegistration `json:"egress,omitempty"`
}

// EgressRegistration is a run's egress policy with the credential values its
// providers name, resolved by the host at registration. The daemon keeps the
// values in memory only (never in its registry file, never in a log); a
// restarted daemon does not serve a restored run's egress (see docs/proxyd.md).
type EgressRegistration struct {
	Policy      EgressPolicy       `json:"policy"`
	Credentials []EgressCredential `json:"credentials,omitempty"`
}

// EgressCredential is one {{name}} value of one provider.
type EgressCredential struct {
	Provider string `json:"provider"`
	Name     string `json:"name"`
	Value    string `json:"value"`
}

// NetworkIdentity is a sandbox found by its source IP (seed 003's identity):
// requests from IP are the run's; one that carries
// "X-Sandbox-ID: name:start-time:session-token" must match all three, and a new
// start time for the same name is a restart (a new registration with a fresh
// budget; the old one is left to expire). The session token is kept only as a
// hash.
type NetworkIdentity struct {
	IP           string    `json:"ip"`
	Name         string    `json:"name"`
	StartTime    time.Time `json:"start_time"`
	SessionToken string    `json:"session_token"`
}

// HeaderSandboxID is the optional identity header of network sandboxes.
const HeaderSandboxID = "X-Sandbox-ID"

// RateLimit limits one run's calls.
type RateLimit struct {
	// RPS and Burst are a token bucket of calls; RPS 0 means no limit.
	RPS   float64 `json:"rps"`
	Burst int     `json:"burst"`
	// Streams caps the run's calls in flight at once; 0 means no cap.
	Streams int `json:"streams"`
}

// Registered is the answer to a registration.
type Registered struct {
	// ID names the run in the admin API.
	ID      string `json:"id"`
	RunID   string `json:"run_id"`
	Attempt int    `json:"attempt"`
	// SocketDir is the run's own directory (mount it at bridgeapi.SocketDir);
	// SocketPath the socket in it.
	SocketDir  string `json:"socket_dir"`
	SocketPath string `json:"socket_path"`
	// Token is the run token; the same is in SocketDir/bridgeapi.TokenFile for
	// the bridge.
	// Network registrations have neither socket nor token.
	Token       string    `json:"token,omitempty"`
	TokenExpiry time.Time `json:"token_expiry,omitzero"`
	// Restarted names the registration a network sandbox's restart superseded.
	Restarted string `json:"restarted,omitempty"`
	// Egress says SocketDir also serves egress (its socket directory holds bridgeapi.EgressSocketName).
	Egress bool `json:"egress,omitempty"`
}

// RunInfo describes a registered run.
type RunInfo struct {
	ID           string    `json:"id"`
	RunID        string    `json:"run_id"`
	Attempt      int       `json:"attempt"`
	SocketDir    string    `json:"socket_dir,omitempty"`
	IP           string    `json:"ip,omitempty"`
	RegisteredAt time.Time `json:"registered_at"`
	LastSeen     time.Time `json:"last_seen"`
	Calls        int       `json:"calls"`
	Tokens       int64     `json:"tokens"`
}

// DeregisterResponse is a deregistered run's whole audit.
type DeregisterResponse struct {
	Audit []AuditRecord `json:"audit"`
	// Attestation is what the run's bridge attested, if it did: the bridge's report
	// (api/bridgeapi's Attestation) as the daemon keeps it.
	Attestation json.RawMessage `json:"attestation,omitempty"`
	// Error reports calls that were cut because the grace ran out.
	Error string `json:"error,omitempty"`
	// Egress is the run's egress audit (with an egress policy).
	Egress []EgressRecord `json:"egress,omitempty"`
	// EgressSummary counts the egress records written and those not kept, per guard.
	EgressSummary *EgressSummary `json:"egress_summary,omitempty"`
}

// EgressAudit is a run's egress records so far.
type EgressAudit struct {
	Records []EgressRecord `json:"records"`
}

// AuditPage is a slice of a run's audit.
type AuditPage struct {
	Records []AuditRecord `json:"records"`
	// Next is the seq to pass as after= for the records that follow.
	Next int64 `json:"next"`
}

// AuditEntry is one line of an audit stream.
type AuditEntry struct {
	Seq    int64       `json:"seq"`
	Record AuditRecord `json:"record"`
}

// AttestationAnswer is the answer to GET PathRuns/{id}/attestation: the bridge's
// report (api/bridgeapi's Attestation) as the daemon keeps it, null before the run's
// bridge attested.
type AttestationAnswer struct {
	Attestation json.RawMessage `json:"attestation"`
}

// Health is the daemon's health.
type Health struct {
	Status string `json:"status"`
	Runs   int    `json:"runs"`
}
