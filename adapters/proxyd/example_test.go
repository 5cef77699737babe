package proxyd_test

import (
	"context"
	"fmt"
	"log"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/port"
)

// A host registers a run with a running sandbox-proxyd, mounts the run's socket
// directory into its sandbox (the runner does, from Socket), and gets the audit
// back when it stops the proxy.
func ExampleManager() {
	c, err := proxyd.NewClient("/run/agentsandbox-proxyd/admin.sock")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	m, err := proxyd.NewManager(c, proxyd.WithSandboxUID(1001), proxyd.WithRateLimit(proxyd.RateLimit{RPS: 5, Burst: 10, Streams: 4}))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	p, err := m.Start(ctx, port.ProxySpec{
		RunID: "run-1", Upstream: "http://127.0.0.1:4000", APIKey: "sk-llm-routes-only",
		Attribution: port.Attribution{BillingAccountID: "acct-42"},
		Budget:      port.Budget{MaxCalls: 20},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("mount", p.Socket().HostDir, "at", port.LLMSocketDir)
	// ... run the sandbox with RunSpec.LLM = &sock ...
	audit, err := p.Stop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(audit), "calls audited")
}

// The admin client lists the daemon's runs and follows one run's audit as it is written.
func ExampleClient_StreamAudit() {
	c, err := proxyd.NewClient("/run/agentsandbox-proxyd/admin.sock")
	if err != nil {
		log.Fatal(err)
	}
	runs, err := c.List(context.Background())
	if err != nil || len(runs) == 0 {
		return
	}
	_ = c.StreamAudit(context.Background(), runs[0].ID, 0, func(e proxyd.AuditEntry) error {
		fmt.Println(e.Seq, e.Record.Status, e.Record.Model, e.Record.CallID)
		return nil
	})
}
