package nomad_test

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox/adapters/nomad"
	"github.com/agentsandbox/sandbox/port"
)

// A run on a Nomad cluster, with its LLM proxy as a sidecar beside it. The bridge and
// the init are at these paths on every client node; the agent's image and the proxy's
// (nomad.ProxyImage) are loaded into every node's Docker engine.
func Example() {
	r, err := nomad.NewRunner(
		nomad.WithAddress("http://127.0.0.1:4646"),
		nomad.WithOwner("my-host"),
		nomad.WithBridge("/opt/agentsandbox/sandbox-bridge"),
		nomad.WithInit("/opt/agentsandbox/sandbox-nomad-init"),
		nomad.WithProxyImage(nomad.DefaultProxyImage),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	proxy, err := r.Start(ctx, port.ProxySpec{
		RunID: "run-42", Upstream: "http://litellm.internal:4000", APIKey: "sk-virtual-key",
		Attribution: port.Attribution{BillingAccountID: "acct-7"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	sock := proxy.Socket()
	res, err := r.RunOnce(ctx, port.RunSpec{
		RunID: "run-42", Image: "my-agent:1", Argv: []string{"/agent"}, LLM: &sock,
		Limits: port.Limits{Timeout: 5 * time.Minute},
	})
	audit, _ := proxy.Stop(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("exit %d, %d LLM calls\n", res.ExitCode, len(audit))
}
