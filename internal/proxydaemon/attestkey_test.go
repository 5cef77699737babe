package proxydaemon_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	api "github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// TestAttestKeyKeptAcrossRestart: the daemon mints a run's attestation key at
// registration and takes the run's attestation only with it, before and after a
// restart (the key is in the sealed registration); a report without it is refused
// and changes nothing. The key is in no file of the run's socket directory.
func TestAttestKeyKeptAcrossRestart(t *testing.T) {
	up := litellmtest.NewServer()
	defer up.Close()
	dir := shortDir(t)
	d := startDaemon(t, dir, nil)
	a := register(t, d, up, "run-attest-key", func(r *api.RegisterRequest) { r.RequireAttestation = true })
	if !bridgeapi.ValidAttestKey(a.AttestKey) {
		t.Fatalf("registered without an attestation key: %q", a.AttestKey)
	}
	entries, err := os.ReadDir(a.SocketDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(a.SocketDir, e.Name())); err == nil && bytes.Contains(b, []byte(a.AttestKey)) {
			t.Errorf("the attestation key is in the socket directory's %s", e.Name())
		}
	}
	clean, _ := json.Marshal(bridgeapi.Attestation{UID: 1001, GID: 1001, Interfaces: []string{"lo"}, CapEff: "0", CapPrm: "0", CapBnd: "0",
		NoNewPrivs: true, Seccomp: 2, ReadOnlyRoot: true, OpenFiles: 1024, PIDsMax: "64"})
	attest := func(c *http.Client, key string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://sandbox"+bridgeapi.AttestationPath, bytes.NewReader(clean))
		if key != "" {
			req.Header.Set(bridgeapi.AttestKeyHeader, key)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	c := runClient(a.SocketPath, a.Token)
	if code := attest(c, ""); code != http.StatusForbidden {
		t.Errorf("a report without the key: %d, want 403", code)
	}
	d.close()
	d2 := startDaemon(t, dir, nil)
	c = runClient(a.SocketPath, a.Token)
	if code := attest(c, bridgeapi.NewAttestKey()); code != http.StatusForbidden {
		t.Errorf("after the restart, a report with another key: %d, want 403", code)
	}
	if resp, body := post(t, c, chat); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "attestation") {
		t.Errorf("a call before the bridge's report: %d %s", resp.StatusCode, body)
	}
	if code := attest(c, a.AttestKey); code != http.StatusNoContent {
		t.Fatalf("after the restart, the bridge's report: %d", code)
	}
	if code := attest(c, a.AttestKey); code != http.StatusConflict {
		t.Errorf("a second report: %d, want 409", code)
	}
	if resp, body := post(t, c, chat); resp.StatusCode != http.StatusOK {
		t.Errorf("a call after the bridge's report: %d %s", resp.StatusCode, body)
	}
	if att, err := d2.client.Attestation(t.Context(), a.ID); err != nil || att == nil || att.UID != 1001 {
		t.Errorf("the daemon's record: %+v %v", att, err)
	}
}
