package llmproxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// maxAttestationBytes bounds an attestation body; a real one is well under 2 KiB.
const maxAttestationBytes = 64 << 10

// Attest records the run's attestation. Only the first counts (ServeAttestation
// takes it only with the run's attestation key, which the bridge alone holds).
// It reports whether a was recorded. It is the host's own path (a report read
// from the slot's stub, say): it takes no attestation key.
func (m *Meter) Attest(a *port.Attestation) bool {
	ok, err := m.attest(a)
	return ok && err == nil
}

// attest records a unless the run has one; a durable front persists it first
// (MeterConfig.OnAttest), and an error there records nothing.
func (m *Meter) attest(a *port.Attestation) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.attestation != nil || m.stopping {
		return false, nil
	}
	if m.cfg.OnAttest != nil {
		if err := m.cfg.OnAttest(a); err != nil {
			return false, err
		}
	}
	m.attestation = a
	return true, nil
}

// Attestation returns the run's attestation, nil before one arrived.
func (m *Meter) Attestation() *port.Attestation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.attestation
}

// attestationRefusal refuses calls of a run that must be attested and is not, or
// whose attestation shows broken isolation.
func (m *Meter) attestationRefusal() *Refusal {
	if !m.cfg.RequireAttestation {
		return nil
	}
	a := m.Attestation()
	if a == nil {
		return &Refusal{http.StatusForbidden, "attestation_missing", "permission_error",
			"attestation: the run's sandbox has not attested its isolation; no LLM access"}
	}
	if v := a.Violations(); len(v) > 0 {
		return &Refusal{http.StatusForbidden, "attestation_failed", "permission_error",
			"attestation: the run's sandbox is not isolated as required: " + Clip(strings.Join(v, "; "), 512)}
	}
	return nil
}

// ServeAttestation takes a run's attestation (POST port.AttestationPath): 204 when
// recorded, 403 when the run has an attestation key and the request does not carry
// it (bridgeapi.AttestKeyHeader), 409 when the run already has one, 400 for a
// malformed body. A refused report changes nothing: the bridge's, which carries
// the key, still counts when it arrives after it. Fronts call it for that path
// instead of Forward; it is never forwarded.
func ServeAttestation(w http.ResponseWriter, r *http.Request, m *Meter) {
	if r.Method != http.MethodPost {
		WriteError(w, http.StatusMethodNotAllowed, "invalid_request_error", "attestation: POST only")
		return
	}
	if m.cfg.AttestKey != "" && !bridgeapi.AttestKeyMatches(m.cfg.AttestKey, r.Header.Get(bridgeapi.AttestKeyHeader)) {
		m.log.Warn("an attestation without the run's attestation key was refused: only the bridge holds the key")
		WriteError(w, http.StatusForbidden, "permission_error", "attestation: not sent by the run's bridge")
		return
	}
	var a port.Attestation
	dec := json.NewDecoder(io.LimitReader(r.Body, maxAttestationBytes))
	if err := dec.Decode(&a); err != nil {
		WriteError(w, http.StatusBadRequest, "invalid_request_error", "attestation: malformed body")
		return
	}
	ok, err := m.attest(&a)
	if err != nil {
		m.log.Error("the attestation could not be stored", "err", err)
		WriteError(w, http.StatusServiceUnavailable, "internal_error", "attestation: could not be stored; try again")
		return
	}
	if !ok {
		m.log.Warn("a second attestation was refused: the run has one")
		WriteError(w, http.StatusConflict, "invalid_request_error", "attestation: the run already has one")
		return
	}
	if v := a.Violations(); len(v) > 0 {
		m.log.Warn("the sandbox attested broken isolation", "violations", strings.Join(v, "; "))
	}
	w.WriteHeader(http.StatusNoContent)
}
