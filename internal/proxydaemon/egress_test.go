package proxydaemon_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	api "github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/internal/egress/egresstest"
	"github.com/agentsandbox/sandbox/internal/proxydaemon"
	"github.com/agentsandbox/sandbox/port"
)

const egressCanary = "ghp_proxydEgressCanary0123456789abcdefABCDEF"

// egressClient is what the bridge and a stock tool do together: a forward proxy
// on the run's egress socket, trusting the run's CA bundle.
func egressClient(t *testing.T, dir string) *http.Client {
	t.Helper()
	bundle, err := os.ReadFile(filepath.Join(dir, port.EgressCAName))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("the CA bundle holds no certificate")
	}
	sock := filepath.Join(dir, port.EgressSocketName)
	proxyURL, _ := url.Parse("http://" + port.EgressProxyAddr)
	tr := &http.Transport{
		Proxy: http.ProxyURL(proxyURL),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// TestEgress registers a run with an egress policy and a credential: the daemon
// serves egress.sock and the CA bundle in the run's directory, injects the
// credential for the allowlisted host, refuses another, returns the egress audit
// through the admin API, never writes the value to its state, and does not serve
// a restored run's egress (the value lived only in the old process).
func TestEgress(t *testing.T) {
	up := egresstest.NewUpstream(t, true, "api.test", "evil.test")
	res := egresstest.NewResolver()
	res.Set("api.test", egresstest.Loopback)
	res.Set("evil.test", egresstest.Loopback)
	llm := newEchoLLM(t)
	dir := shortDir(t)
	mut := func(c *proxydaemon.Config) {
		c.Egress = egress.Host{Resolver: res, Roots: up.Pool, RootsPEM: up.PEM, UnsafeAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	}
	d := startDaemon(t, dir, mut)
	m, err := api.NewManager(d.client)
	if err != nil {
		t.Fatal(err)
	}
	var fetched []string
	var live []port.EgressRecord
	creds := port.CredentialFunc(func(_ context.Context, runID, provider, name string) (string, error) {
		fetched = append(fetched, runID+"/"+provider+"/"+name)
		if name == "missing" {
			return "", errors.New("vault says no")
		}
		return egressCanary, nil
	})
	ctx := context.Background()
	p, err := m.StartProxy(ctx, port.ProxySpec{RunID: "egress-unit", Upstream: llm, APIKey: "sk-llm",
		Attribution: port.Attribution{BillingAccountID: "acct"},
		Egress: &port.EgressPolicy{Credentials: creds, OnAudit: func(r port.EgressRecord) { live = append(live, r) },
			Providers: []port.EgressProvider{{ID: "github", URIs: []string{"https://api.test:" + up.Port() + "/v1/"}, Credentials: []string{"token", "missing"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	sock := p.Socket()
	if !sock.Egress {
		t.Fatal("the socket does not say it serves egress")
	}
	if strings.Join(fetched, ",") != "egress-unit/github/token,egress-unit/github/missing" {
		t.Errorf("credentials fetched: %v", fetched)
	}
	c := egressClient(t, sock.HostDir)

	get := func(target, auth string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, target, nil)
		req.Header.Set("Authorization", auth)
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	code, body, err := get("https://api.test:"+up.Port()+"/v1/repos", "Bearer {{token}}")
	if err != nil || code != 200 {
		t.Fatalf("allowlisted: %d %s %v", code, body, err)
	}
	if strings.Contains(body, egressCanary) || !strings.Contains(body, "Bearer {{token}}") {
		t.Errorf("the echoed credential was not redacted: %s", body)
	}
	if seen := up.Seen(); len(seen) != 1 || seen[0].Header.Get("Authorization") != "Bearer "+egressCanary {
		t.Fatalf("the upstream saw %+v", seen)
	}
	code, body, err = get("https://api.test:"+up.Port()+"/v1/x", "Bearer {{missing}}")
	if err != nil || code != http.StatusBadRequest || !strings.Contains(body, `"guard":"placeholder"`) {
		t.Errorf("unresolved placeholder: %d %s %v", code, body, err)
	}
	if _, _, err := get("https://evil.test:"+up.Port()+"/v1/repos", ""); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("a host off the allowlist was not refused: %v", err)
	}
	if len(up.Seen()) != 1 {
		t.Errorf("refused requests reached the upstream: %+v", up.Seen())
	}

	recs, err := d.client.EgressAudit(ctx, p.Registration().ID)
	if err != nil || len(recs) != 3 {
		t.Fatalf("egress audit %+v %v", recs, err)
	}
	if recs[0].Status != 200 || recs[0].Provider != "github" || recs[0].Mode != "mitm" || recs[0].RunID != "egress-unit" {
		t.Errorf("record %+v", recs[0])
	}
	if recs[2].Guard != port.GuardAllowlist {
		t.Errorf("the refusal's record %+v", recs[2])
	}

	// The daemon's state holds the policy, never the value.
	scanState(t, dir, egressCanary)

	// A restart brings the run's LLM socket back, not its egress.
	d.close()
	d2 := startDaemon(t, dir, mut)
	if _, err := os.Stat(filepath.Join(sock.HostDir, port.LLMSocketName)); err != nil {
		t.Fatalf("the restored run has no LLM socket: %v", err)
	}
	for _, f := range []string{port.EgressSocketName, port.EgressCAName} {
		if _, err := os.Stat(filepath.Join(sock.HostDir, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a restored run has %s without its egress front: %v", f, err)
		}
	}
	out, err := d2.client.Deregister(ctx, p.Registration().ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Egress) != 0 {
		t.Errorf("egress records after the restart: %+v", out.Egress)
	}

	// Stop through the adapter on a fresh run: the audit and the live callback.
	m2, _ := api.NewManager(d2.client)
	p2, err := m2.StartProxy(ctx, port.ProxySpec{RunID: "egress-unit2", Upstream: llm, APIKey: "sk-llm", Attribution: port.Attribution{BillingAccountID: "acct"},
		Egress: &port.EgressPolicy{Credentials: creds, OnAudit: func(r port.EgressRecord) { live = append(live, r) },
			Providers: []port.EgressProvider{{ID: "github", URIs: []string{"https://api.test:" + up.Port() + "/v1/"}, Credentials: []string{"token"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	c2 := egressClient(t, p2.Socket().HostDir)
	resp, err := c2.Get("https://api.test:" + up.Port() + "/v1/again")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := p2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := p2.EgressAudit(); len(got) != 1 || got[0].Path != "/v1/again" || got[0].Status != 200 {
		t.Errorf("egress audit after Stop: %+v", got)
	}
	if len(live) != 1 || live[0].RunID != "egress-unit2" {
		t.Errorf("live records: %+v", live)
	}
	if _, err := os.Stat(p2.Socket().HostDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the run directory is left: %v", err)
	}
}

func TestEgressRefusals(t *testing.T) {
	d := startDaemon(t, shortDir(t), nil)
	llm := newEchoLLM(t)
	ctx := context.Background()
	pol := proxydapi.EgressPolicy{Providers: []proxydapi.EgressProvider{{ID: "gh", URIs: []string{"https://api.test/"}, Credentials: []string{"token"}}}}
	for name, eg := range map[string]*api.EgressRegistration{
		"unlisted credential": {Policy: pol, Credentials: []api.EgressCredential{{Provider: "gh", Name: "other", Value: egressCanary}}},
		"unknown provider":    {Policy: pol, Credentials: []api.EgressCredential{{Provider: "nope", Name: "token", Value: egressCanary}}},
		"duplicate":           {Policy: pol, Credentials: []api.EgressCredential{{Provider: "gh", Name: "token", Value: "a"}, {Provider: "gh", Name: "token", Value: "b"}}},
		"ip literal":          {Policy: proxydapi.EgressPolicy{Providers: []proxydapi.EgressProvider{{ID: "gh", URIs: []string{"https://10.0.0.1/"}}}}},
		"no providers":        {Policy: proxydapi.EgressPolicy{}},
	} {
		_, err := d.client.Register(ctx, api.RegisterRequest{RunID: "egress-bad", Upstream: llm, APIKey: "k", Attribution: proxydapi.Attribution{BillingAccountID: "acct"}, Egress: eg})
		if !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "egress") || strings.Contains(err.Error(), egressCanary) {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := d.client.Register(ctx, api.RegisterRequest{RunID: "egress-bad", Upstream: llm, APIKey: "k", Attribution: proxydapi.Attribution{BillingAccountID: "acct"},
		Egress:  &api.EgressRegistration{Policy: proxydapi.EgressPolicy{Providers: []proxydapi.EgressProvider{{ID: "gh", URIs: []string{"https://api.test/"}}}}},
		Network: &api.NetworkIdentity{IP: "10.1.2.3", Name: "n", StartTime: time.Now(), SessionToken: "s"}})
	if !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("egress on a network registration: %v", err)
	}
	if runs, _ := d.client.List(ctx); len(runs) != 0 {
		t.Errorf("refused registrations left runs: %+v", runs)
	}
}

// newEchoLLM is an LLM upstream the egress tests never call.
func newEchoLLM(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// scanState fails if any file under dir holds s.
func scanState(t *testing.T, dir, s string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), s) {
			t.Errorf("%s holds the credential", path)
		}
		return nil
	})
}
