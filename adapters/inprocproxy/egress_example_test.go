package inprocproxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/port"
)

// A run with web access: its socket directory also serves egress. The client plays
// the agent behind the bridge's 127.0.0.1:3128: a destination off the allowlist gets
// the JSON denial, and the host gets the record.
func ExampleManager_egress() {
	base, err := os.MkdirTemp("", "egress-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(base)
	m, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner("example"))
	if err != nil {
		panic(err)
	}
	vault := port.CredentialFunc(func(ctx context.Context, runID, provider, name string) (string, error) {
		return "ghp_host-only", nil
	})
	p, err := m.StartProxy(context.Background(), port.ProxySpec{
		RunID: "run-1", Upstream: "http://127.0.0.1:4000", APIKey: "sk-host-only",
		Attribution: port.Attribution{BillingAccountID: "acct-1"},
		Egress: &port.EgressPolicy{
			Providers:   []port.EgressProvider{{ID: "github", URIs: []string{"https://api.github.com/repos/acme/"}, Credentials: []string{"token"}}},
			Credentials: vault,
		},
	})
	if err != nil {
		panic(err)
	}
	dir := p.Socket().HostDir
	fmt.Println("egress:", p.Socket().Egress)

	c := &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: port.EgressProxyAddr}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, port.EgressSocketName))
		},
	}}
	resp, err := c.Get("http://metadata.example/")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))

	if _, err := p.Stop(context.Background()); err != nil {
		panic(err)
	}
	for _, r := range p.EgressAudit() {
		fmt.Println(r.Mode, r.Host, r.Status, r.Guard)
	}
	// Output:
	// egress: true
	// 403 {"error":{"guard":"allowlist","message":"the destination is not on the run's allowlist","target":"metadata.example","type":"egress_denied"}}
	//
	// forward metadata.example 403 allowlist
}
