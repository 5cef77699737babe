package llmproxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// TestServeAttestationNeedsTheKey: a run with an attestation key takes only a
// report that carries it; a report without it, or with another, is refused (403)
// and changes nothing, so the bridge's still counts when it comes after; a second
// report with the key is refused (409). A run without a key takes the first.
func TestServeAttestationNeedsTheKey(t *testing.T) {
	key := bridgeapi.NewAttestKey()
	m := NewMeter(MeterConfig{RunID: "r", RequireAttestation: true, AttestKey: key})
	post := func(kernel, k string) int {
		r := httptest.NewRequest(http.MethodPost, bridgeapi.AttestationPath, strings.NewReader(`{"kernel_version":"`+kernel+`"}`))
		if k != "" {
			r.Header.Set(bridgeapi.AttestKeyHeader, k)
		}
		w := httptest.NewRecorder()
		ServeAttestation(w, r, m)
		return w.Code
	}
	for _, c := range []struct{ kernel, key string }{{"forged-none", ""}, {"forged-other", bridgeapi.NewAttestKey()}, {"forged-prefix", key[:63]}, {"forged-longer", key + "0"}} {
		if code := post(c.kernel, c.key); code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", c.kernel, code)
		}
	}
	if a := m.Attestation(); a != nil {
		t.Fatalf("a report without the key was recorded: %+v", *a)
	}
	if ref := m.attestationRefusal(); ref == nil || ref.Blocked != "attestation_missing" {
		t.Errorf("before the bridge's report: %+v", ref)
	}
	if code := post("bridge", key); code != http.StatusNoContent {
		t.Fatalf("the bridge's report: %d", code)
	}
	if code := post("again", key); code != http.StatusConflict {
		t.Errorf("a second report with the key: %d, want 409", code)
	}
	if a := m.Attestation(); a == nil || a.KernelVersion != "bridge" {
		t.Errorf("recorded %+v, want the bridge's", a)
	}

	m = NewMeter(MeterConfig{RunID: "r2"})
	if code := post("first", ""); code != http.StatusNoContent {
		t.Errorf("a run without a key: %d", code)
	}
}
