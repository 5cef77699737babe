package inprocproxy

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

func goodAttestation() port.Attestation {
	z := "0000000000000000"
	return port.Attestation{UID: 1001, GID: 1001, Interfaces: []string{"lo"}, CapEff: z, CapPrm: z, CapBnd: z,
		NoNewPrivs: true, Seccomp: 2, ReadOnlyRoot: true, OpenFiles: 1024, PIDsMax: "256"}
}

// attest posts a as the run's bridge would, with key (none when empty).
func attest(t *testing.T, c *http.Client, key string, a port.Attestation) int {
	t.Helper()
	b, err := json.Marshal(a)
	require.NoError(t, err)
	hdr := map[string]string{"Content-Type": "application/json"}
	if key != "" {
		hdr[bridgeapi.AttestKeyHeader] = key
	}
	resp, _ := post(t, c, port.AttestationPath, string(b), hdr)
	return resp.StatusCode
}

// TestAttestationGatesLLMAccess: with RequireAttestation, no call reaches the upstream
// before the sandbox attested a clean isolation; an attestation without the run's
// key (one the agent sends, even before the bridge) is refused and changes nothing;
// the bridge's (with the key) is the only one; the proxy keeps it.
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

	key := p.Socket().AttestKey
	require.True(t, bridgeapi.ValidAttestKey(key), "the socket carries the run's attestation key")
	good := goodAttestation()
	forged := good
	forged.UID = 4242
	assert.Equal(t, http.StatusForbidden, attest(t, c, "", forged), "an attestation without the key is refused")
	assert.Equal(t, http.StatusForbidden, attest(t, c, bridgeapi.NewAttestKey(), forged), "an attestation with another key is refused")
	assert.Nil(t, p.Attestation())
	assert.Equal(t, http.StatusNoContent, attest(t, c, key, good))
	assert.Equal(t, http.StatusConflict, attest(t, c, key, forged), "a second attestation is refused")
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
	require.Equal(t, http.StatusNoContent, attest(t, c, p.Socket().AttestKey, bad))
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
	resp, _ = post(t, c, port.AttestationPath, "{not json", map[string]string{bridgeapi.AttestKeyHeader: p.Socket().AttestKey})
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Nil(t, p.Attestation())
}
