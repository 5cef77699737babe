package sandboxgw

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// TestAttestationNeedsTheSandboxKey: the gateway keeps the report of the latest
// sandbox's bridge only: one without that sandbox's attestation key (the gateway's
// own processes, an earlier sandbox's) is refused and changes nothing; the first
// with it counts, a second is refused; a restart's new key starts over.
func TestAttestationNeedsTheSandboxKey(t *testing.T) {
	g := &Gateway{log: slog.New(slog.DiscardHandler)}
	post := func(body, key string) int {
		r := httptest.NewRequest(http.MethodPost, attestationPath, strings.NewReader(body))
		if key != "" {
			r.Header.Set(bridgeapi.AttestKeyHeader, key)
		}
		w := httptest.NewRecorder()
		g.serveAttestation(w, r)
		return w.Code
	}
	if code := post(`{"uid":1}`, ""); code != http.StatusForbidden {
		t.Errorf("before any sandbox: %d, want 403", code)
	}
	first := bridgeapi.NewAttestKey()
	g.attestKey = first
	if code := post(`{"uid":666}`, ""); code != http.StatusForbidden {
		t.Errorf("without the key: %d, want 403", code)
	}
	if code := post(`{"uid":1001}`, first); code != http.StatusNoContent {
		t.Errorf("the bridge's: %d, want 204", code)
	}
	if code := post(`{"uid":666}`, first); code != http.StatusConflict {
		t.Errorf("a second with the key: %d, want 409", code)
	}
	if got := string(g.Attestation()); got != `{"uid":1001}` {
		t.Errorf("kept %s, want the bridge's", got)
	}
	g.attestKey, g.attested = bridgeapi.NewAttestKey(), false // a restart
	if code := post(`{"uid":666}`, first); code != http.StatusForbidden {
		t.Errorf("the earlier sandbox's key after a restart: %d, want 403", code)
	}
	if code := post(`{"uid":1002}`, g.attestKey); code != http.StatusNoContent || string(g.Attestation()) != `{"uid":1002}` {
		t.Errorf("the new sandbox's bridge: %d %s", code, g.Attestation())
	}
}
