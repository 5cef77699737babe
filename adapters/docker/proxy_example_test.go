package docker_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/port"
)

// An nginx proxy per run: shared options (owner, logger, daemon) fit both constructors;
// the proxy's own (image, audit limit) fit only NewProxyManager.
func ExampleNewProxyManager() {
	pm, err := docker.NewProxyManager(
		docker.WithOwner("my-service"),
		docker.WithProxyImage("nginx:alpine"),
		docker.WithMaxAuditRecords(1000),
		docker.WithUnfilteredBodies(), // nginx cannot filter bodies: acknowledged
	)
	if err != nil {
		panic(err)
	}
	defer pm.Close()
	ctx := context.Background()
	p, err := pm.Start(ctx, port.ProxySpec{
		RunID: "run-42", Upstream: "http://litellm:4000", APIKey: "sk-litellm-virtual-key",
		Attribution: port.Attribution{BillingAccountID: "acct-7"},
	})
	if err != nil {
		panic(err)
	}
	// Give p.Socket() to the run's sandbox (port.RunSpec.LLM), run it, then:
	audit, err := p.Stop(ctx)
	if errors.Is(err, docker.ErrAuditTruncated) {
		fmt.Println("more calls than the audit keeps:", err)
	}
	fmt.Println(len(audit), "LLM calls audited")
}
