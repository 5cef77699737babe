package inprocproxy

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/port"
)

func goodAttestation() port.Attestation {
	z := "0000000000000000"
	return port.Attestation{UID: 1001, GID: 1001, Interfaces: []string{"lo"}, CapEff: z, CapPrm: z, CapBnd: z,
		NoNewPrivs: true, Seccomp: 2, ReadOnlyRoot: true, OpenFiles: 1024, PIDsMax: "256"}
}

func attest(t *testing.T, c *http.Client, a port.Attestation) int {
	t.Helper()
	b, err := json.Marshal(a)
	require.NoError(t, err)
	resp, _ := post(t, c, port.AttestationPath, string(b), map[string]string{"Content-Type": "application/json"})
	return resp.StatusCode
}

// TestAttestationGatesLLMAccess: with RequireAttestation, no call reaches the upstream
// before the sandbox attested a clean isolation; the first attestation is the only
// one (a later one, which only the agent can send, is refused); the proxy keeps it.
func TestAttestationGatesLLMAccess(t *testing.T) {
	up := newUpstream(t)
	m, _ := newManager(t)
	spec := testSpec("run-attest", up.URL)
	spec.RequireAttestation = true
	p := start(t, m, spec)
	c := client(p)

	resp, body := post(t, c, "/v1/chat/completions", chatRequest, nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, body, "attestation: the run's sandbox has not attested")
	assert.Nil(t, p.Attestation())

	good := goodAttestation()
	assert.Equal(t, http.StatusNoContent, attest(t, c, good))
	forged := good
	forged.UID = 4242
	assert.Equal(t, http.StatusConflict, attest(t, c, forged), "a second attestation is refused")
	require.NotNil(t, p.Attestation())
	assert.Equal(t, 1001, p.Attestation().UID, "the first attestation stands")

	resp, _ = post(t, c, "/v1/chat/completions", chatRequest, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Len(t, up.requests(), 1, "only the attested call reached the upstream")

	recs, err := p.Stop(t.Context())
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Equal(t, "attestation_missing", recs[0].Blocked)
	assert.Empty(t, recs[1].Blocked)
}

func TestAttestationWithViolationsRefused(t *testing.T) {
	up := newUpstream(t)
	m, _ := newManager(t)
	spec := testSpec("run-attest-bad", up.URL)
	spec.RequireAttestation = true
	p := start(t, m, spec)
	c := client(p)
	bad := goodAttestation()
	bad.Interfaces = []string{"eth0", "lo"}
	require.Equal(t, http.StatusNoContent, attest(t, c, bad))
	resp, body := post(t, c, "/v1/chat/completions", chatRequest, nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, body, "network interfaces [eth0 lo]")
	assert.Empty(t, up.requests())
}

// Without RequireAttestation the attestation is recorded but gates nothing.
func TestAttestationOptional(t *testing.T) {
	up := newUpstream(t)
	m, _ := newManager(t)
	p := start(t, m, testSpec("run-attest-opt", up.URL))
	c := client(p)
	resp, _ := post(t, c, "/v1/chat/completions", chatRequest, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = post(t, c, port.AttestationPath, "{not json", nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Nil(t, p.Attestation())
}
