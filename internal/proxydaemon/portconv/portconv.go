// Package portconv converts between the host's port types and the shared proxy
// daemon's wire types (api/proxydapi) at both ends of the admin API: the client
// (adapters/proxyd) and the daemon (internal/proxydaemon). The wire types mirror
// port's field for field where the JSON is the same, so most conversions are Go
// conversions the compiler checks: a field added to one side and not the other
// stops the build here instead of vanishing on the wire.
package portconv

import (
	"encoding/json"
	"fmt"

	api "github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/port"
)

// each converts every element of in with f (nil stays nil).
func each[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// eachValue is each for a map's values; nil stays nil.
func eachValue[K comparable, T, U any](in map[K]T, f func(T) U) map[K]U {
	if in == nil {
		return nil
	}
	out := make(map[K]U, len(in))
	for k, v := range in {
		out[k] = f(v)
	}
	return out
}

// WireAttribution converts a to the wire.
func WireAttribution(a port.Attribution) api.Attribution { return api.Attribution(a) }

// Attribution converts a from the wire.
func Attribution(a api.Attribution) port.Attribution { return port.Attribution(a) }

// WireBudget converts b to the wire.
func WireBudget(b port.Budget) api.Budget { return api.Budget(b) }

// Budget converts b from the wire.
func Budget(b api.Budget) port.Budget { return port.Budget(b) }

// WireEgressPolicy converts p to the wire: its credential source and audit callback stay
// with the host (the values travel beside it, resolved).
func WireEgressPolicy(p port.EgressPolicy) api.EgressPolicy {
	return api.EgressPolicy{
		Providers: each(p.Providers, func(v port.EgressProvider) api.EgressProvider {
			return api.EgressProvider{ID: v.ID, URIs: v.URIs, Credentials: v.Credentials, TunnelOnly: v.TunnelOnly,
				Placements: eachValue(v.Placements, func(pl port.CredentialPlacement) api.CredentialPlacement { return api.CredentialPlacement(pl) })}
		}),
		MaxRequestBytes: p.MaxRequestBytes, MaxRunBytes: p.MaxRunBytes,
		ResponseLimit: p.ResponseLimit, ResponseCeiling: p.ResponseCeiling, UpstreamProxy: p.UpstreamProxy,
		MaxRequests: p.MaxRequests, RPS: p.Rate.RPS, Burst: p.Rate.Burst,
	}
}

// EgressPolicy converts p from the wire, without a credential source or audit callback.
func EgressPolicy(p api.EgressPolicy) port.EgressPolicy {
	return port.EgressPolicy{
		Providers: each(p.Providers, func(w api.EgressProvider) port.EgressProvider {
			return port.EgressProvider{ID: w.ID, URIs: w.URIs, Credentials: w.Credentials, TunnelOnly: w.TunnelOnly,
				Placements: eachValue(w.Placements, func(pl api.CredentialPlacement) port.CredentialPlacement { return port.CredentialPlacement(pl) })}
		}),
		MaxRequestBytes: p.MaxRequestBytes, MaxRunBytes: p.MaxRunBytes,
		ResponseLimit: p.ResponseLimit, ResponseCeiling: p.ResponseCeiling, UpstreamProxy: p.UpstreamProxy,
		MaxRequests: p.MaxRequests, Rate: port.EgressRate{RPS: p.RPS, Burst: p.Burst},
	}
}

// WireAuditRecord converts r to the wire.
func WireAuditRecord(r port.AuditRecord) api.AuditRecord { return api.AuditRecord(r) }

// AuditRecord converts r from the wire.
func AuditRecord(r api.AuditRecord) port.AuditRecord { return port.AuditRecord(r) }

// WireAuditRecords converts rs to the wire.
func WireAuditRecords(rs []port.AuditRecord) []api.AuditRecord { return each(rs, WireAuditRecord) }

// AuditRecords converts rs from the wire.
func AuditRecords(rs []api.AuditRecord) []port.AuditRecord { return each(rs, AuditRecord) }

// WireEgressRecord converts r to the wire.
func WireEgressRecord(r port.EgressRecord) api.EgressRecord { return api.EgressRecord(r) }

// EgressRecord converts r from the wire.
func EgressRecord(r api.EgressRecord) port.EgressRecord { return port.EgressRecord(r) }

// WireEgressRecords converts rs to the wire.
func WireEgressRecords(rs []port.EgressRecord) []api.EgressRecord { return each(rs, WireEgressRecord) }

// EgressRecords converts rs from the wire.
func EgressRecords(rs []api.EgressRecord) []port.EgressRecord { return each(rs, EgressRecord) }

// WireEgressSummary converts s to the wire (nil stays nil).
func WireEgressSummary(s *port.EgressSummary) *api.EgressSummary {
	if s == nil {
		return nil
	}
	w := api.EgressSummary(*s)
	return &w
}

// EgressSummary converts s from the wire (nil stays nil).
func EgressSummary(s *api.EgressSummary) *port.EgressSummary {
	if s == nil {
		return nil
	}
	v := port.EgressSummary(*s)
	return &v
}

// WireAttestation is a as the wire carries it: the bridge's JSON (nil when a is).
func WireAttestation(a *port.Attestation) json.RawMessage {
	if a == nil {
		return nil
	}
	b, err := json.Marshal(a)
	if err != nil {
		return nil // a struct of strings, numbers and a time: cannot fail
	}
	return b
}

// Attestation converts a from the wire (nil when it carries none). A report that does not
// parse is an error wrapping port.ErrInternal.
func Attestation(b json.RawMessage) (*port.Attestation, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var a port.Attestation
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%w: proxyd: attestation: %w", port.ErrInternal, err)
	}
	return &a, nil
}
