package sandboxgw_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/openclaw/sandboxgw"
	"github.com/agentsandbox/sandbox/port"
)

// A gateway in a network=none sandbox on Docker, one run billed to its account.
func Example() {
	ctx := context.Background()
	runner, err := docker.NewRunner(docker.WithBridge("/usr/local/lib/agentsandbox/bridge"))
	if err != nil {
		panic(err)
	}
	router, err := billing.NewRouter("http://litellm.internal:4000", "sk-virtual-key")
	if err != nil {
		panic(err)
	}
	gw, err := sandboxgw.Start(ctx, sandboxgw.Options{
		Runner:  runner,
		Router:  router,
		Image:   "example/node24:latest",
		Command: []string{"/usr/local/bin/node", "/opt/app/node_modules/openclaw/openclaw.mjs"},
		Mounts:  []port.Mount{{Source: "/srv/openclaw-2026.9.6", Target: "/opt/app"}},
		Dir:     "/var/lib/myhost/gateway-1",
		Models:  []openclaw.Model{{ID: "gpt-4o-mini", ContextWindow: 128000, MaxTokens: 16384}},
	})
	if err != nil {
		panic(err)
	}
	defer gw.Close(ctx)

	reg, err := router.Register(billing.Run{RunID: "run-1", Attribution: port.Attribution{BillingAccountID: "acct-1"}})
	if err != nil {
		panic(err)
	}
	res, err := gw.Run(ctx, sandboxgw.RunRequest{Registration: reg, SessionKey: "acct-1-run-1", Model: "gpt-4o-mini", Message: "Hello", Timeout: 2 * time.Minute})
	if err != nil {
		panic(err) // errors.Is(err, sandboxgw.ErrGatewayDown) when the gateway died mid-run
	}
	audit, _ := reg.Stop(ctx) // reconcile these against LiteLLM's spend logs
	fmt.Println(res.Text, len(audit))
}

// A gateway whose tools may call one API with a token the host holds: the agent writes
// "Authorization: Bearer {{github_token}}" and the egress proxy puts the value in on
// the host.
func Example_egress() {
	ctx := context.Background()
	runner, err := docker.NewRunner(docker.WithBridge("/usr/local/lib/agentsandbox/bridge"))
	if err != nil {
		panic(err)
	}
	router, err := billing.NewRouter("http://litellm.internal:4000", "sk-virtual-key")
	if err != nil {
		panic(err)
	}
	gw, err := sandboxgw.Start(ctx, sandboxgw.Options{
		Runner:  runner,
		Router:  router,
		Image:   "example/node24:latest",
		Command: []string{"/usr/local/bin/node", "/opt/app/node_modules/openclaw/openclaw.mjs"},
		Mounts:  []port.Mount{{Source: "/srv/openclaw-2026.9.6", Target: "/opt/app"}},
		Dir:     "/var/lib/myhost/gateway-2",
		Models:  []openclaw.Model{{ID: "gpt-4o-mini", ContextWindow: 128000, MaxTokens: 16384}},
		Egress: &port.EgressPolicy{
			Providers: []port.EgressProvider{{
				ID:          "github",
				URIs:        []string{"https://api.github.com/repos/acme/"},
				Credentials: []string{"github_token"},
			}},
			Credentials: port.CredentialFunc(func(ctx context.Context, runID, provider, name string) (string, error) {
				return os.Getenv("GITHUB_TOKEN"), nil // or a vault look-up
			}),
		},
	})
	if err != nil {
		panic(err)
	}
	defer gw.Close(ctx)
	// ... runs as in the package example; then what the sandbox fetched:
	for _, r := range gw.EgressAudit() {
		fmt.Println(r.Provider, r.Method, r.Host, r.Path, r.Status, r.Guard)
	}
}
