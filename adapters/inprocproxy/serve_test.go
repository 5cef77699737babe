package inprocproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// TestServeOnCallersSocket: Serve runs a proxy on a listener the caller made, with
// the same policy and audit as Start, and Stop leaves the caller's directory alone.
func TestServeOnCallersSocket(t *testing.T) {
	u := newUpstream(t)
	m, err := NewManager()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "llm.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	spec := port.ProxySpec{RunID: "serve-1", Upstream: u.URL, APIKey: testKey, Attribution: port.Attribution{BillingAccountID: "acct"}}
	p, err := m.Serve(context.Background(), spec, ln)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Post("http://proxy/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := u.seen[0].Header.Get("Authorization"); got != "Bearer "+testKey {
		t.Errorf("upstream Authorization = %q", got)
	}
	if sock := p.Socket(); sock.HostDir != "" || sock.Volume != "" || !bridgeapi.ValidAttestKey(sock.AttestKey) {
		t.Errorf("a served proxy names a socket directory, or no attestation key: %+v", sock)
	}
	audit, err := p.Stop(context.Background())
	if err != nil || len(audit) != 1 || audit[0].Status != 200 || audit[0].RunID != "serve-1" {
		t.Errorf("audit %+v, %v", audit, err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("Stop removed the caller's files: %v", err)
	}
	// A bad spec closes the listener and starts nothing.
	ln2, err := net.Listen("unix", filepath.Join(dir, "other.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Serve(context.Background(), port.ProxySpec{RunID: "../x"}, ln2); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("bad spec: %v", err)
	}
	if _, err := ln2.Accept(); err == nil {
		t.Error("the listener of a refused spec is still open")
	}
	if err := ValidateSpec(port.ProxySpec{RunID: "ok", Upstream: "file:///x", APIKey: "k", Attribution: port.Attribution{BillingAccountID: "a"}}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("ValidateSpec: %v", err)
	}
}

// TestServeWithAttestKey: a served proxy takes the attestation key of whoever
// starts the run's sandbox (a Nomad sidecar's), and refuses one that is not a key
// (closing the caller's listener, as for any refused spec).
func TestServeWithAttestKey(t *testing.T) {
	u := newUpstream(t)
	m, err := NewManager()
	if err != nil {
		t.Fatal(err)
	}
	spec := port.ProxySpec{RunID: "serve-key", Upstream: u.URL, APIKey: testKey, Attribution: port.Attribution{BillingAccountID: "acct"}}
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "llm.sock"))
	if err != nil {
		t.Fatal(err)
	}
	key := bridgeapi.NewAttestKey()
	p, err := m.Serve(context.Background(), spec, ln, WithAttestKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Socket().AttestKey; got != key {
		t.Errorf("the served proxy's key %q, want the caller's", got)
	}
	if _, err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err = net.Listen("unix", filepath.Join(t.TempDir(), "llm.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Serve(context.Background(), spec, ln, WithAttestKey("not-a-key")); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a bad key: %v, want ErrInvalidSpec", err)
	}
	if _, err := ln.Accept(); err == nil {
		t.Error("the refused Serve left the listener open")
	}
}
