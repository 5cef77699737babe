package proxyd

import (
	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/api/proxydapi"
)

// The admin API's wire contract lives in api/proxydapi, which the daemon imports
// too; these names are that contract, kept here so the client's callers need one
// import.

// Paths and limits of the admin API (see proxydapi).
const (
	// PathHealth answers GET with Health.
	PathHealth = proxydapi.PathHealth
	// PathRuns takes POST RegisterRequest (answer: Registered) and GET (answer: []RunInfo).
	PathRuns = proxydapi.PathRuns
	// MaxRequestBytes bounds an admin request body.
	MaxRequestBytes = proxydapi.MaxRequestBytes
	// TokenFile is the name of the run token file in a run's socket directory
	// (bridgeapi.TokenFile); the bridge sends its content as the X-Run-Token
	// header of every request.
	TokenFile = bridgeapi.TokenFile
	// HeaderSandboxID is the optional identity header of network sandboxes.
	HeaderSandboxID = proxydapi.HeaderSandboxID
)

type (
	// RegisterRequest registers a run with the daemon.
	RegisterRequest = proxydapi.RegisterRequest
	// EgressRegistration is a run's egress policy with its credential values.
	EgressRegistration = proxydapi.EgressRegistration
	// EgressCredential is one {{name}} value of one provider.
	EgressCredential = proxydapi.EgressCredential
	// NetworkIdentity is a sandbox found by its source IP.
	NetworkIdentity = proxydapi.NetworkIdentity
	// RateLimit limits one run's calls.
	RateLimit = proxydapi.RateLimit
	// Registered is the answer to a registration.
	Registered = proxydapi.Registered
	// RunInfo describes a registered run.
	RunInfo = proxydapi.RunInfo
	// DeregisterResponse is a deregistered run's whole audit.
	DeregisterResponse = proxydapi.DeregisterResponse
	// EgressAudit is a run's egress records so far.
	EgressAudit = proxydapi.EgressAudit
	// AuditPage is a slice of a run's audit.
	AuditPage = proxydapi.AuditPage
	// AuditEntry is one line of an audit stream.
	AuditEntry = proxydapi.AuditEntry
	// Health is the daemon's health.
	Health = proxydapi.Health
	// APIError is the body of every admin error answer.
	APIError = proxydapi.APIError
)
