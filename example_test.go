package sandbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inproc"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/port"
)

// One agent run end to end: a Docker sandbox with no network, an in-process proxy that
// holds the LiteLLM key, and the run's usage reconciled against LiteLLM's spend logs.
func ExampleSandbox_Run() {
	runner, err := docker.NewRunner(docker.WithOwner("my-service"), docker.WithBridge("/opt/agentsandbox/sandbox-bridge"))
	if err != nil {
		panic(err)
	}
	proxies, err := inproc.New(inproc.WithOwner("my-service"), inproc.WithSandboxUID(1001))
	if err != nil {
		panic(err)
	}
	lc, err := litellm.New(litellm.WithBaseURL("http://litellm:4000"), litellm.WithMasterKey("sk-master"))
	if err != nil {
		panic(err)
	}
	rec, err := litellm.NewReconciler(lc)
	if err != nil {
		panic(err)
	}
	sb, err := sandbox.New(runner,
		sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: "http://litellm:4000", APIKey: "sk-master"}),
		sandbox.WithReconciler(rec),
	)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := sb.Run(ctx, sandbox.Request{
		Grant:        sandbox.Grant{AllowSandbox: true}, // the host's policy decides
		RunID:        "run-42",
		Image:        "my-agent:1.0",
		WorkspaceDir: "/srv/runs/run-42",
		Messages:     []sandbox.Message{{Role: "user", Content: "Summarise the repository."}},
		Model:        "gpt-4o-mini",
		Attribution:  port.Attribution{BillingAccountID: "acct-7", UserID: "user-3"},
		Budget:       port.Budget{MaxCalls: 20},
		Reconcile:    true,
	})
	if err != nil {
		fmt.Println("run failed:", err)
		return
	}
	fmt.Println(res.Text)
	fmt.Printf("%d LLM calls, $%.4f\n", res.Usage.Total.Calls, res.Usage.Total.Spend)
}
