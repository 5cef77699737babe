package integration

import (
	"context"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkRunReconcile measures how long Run takes for a one-call agent on Docker
// when LiteLLM writes its spend rows 500 ms after a call (real LiteLLM: 10 to 60 s):
// "sync" waits for the reconciliation (Request.Reconcile), "async" returns once the
// run is over (Request.ReconcileAsync; the usage is waited for outside the timer).
// Both sub-benchmarks run in one invocation, one after the other.
func BenchmarkRunReconcile(b *testing.B) {
	ctx := context.Background()
	bin := testenv.Bridge(b)
	runner, image := dockerRunner(b, bin)
	fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(500 * time.Millisecond))
	defer fake.Close()
	sb, _ := newStack(b, runner, fake)
	run := func(b *testing.B, async bool) {
		req := sandbox.Request{
			Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("bench-rec"), Image: image,
			Argv: []string{"/agent", "calls", "1", "gpt-4o-mini"}, WorkspaceDir: newWorkspace(b), Model: "gpt-4o-mini",
			Attribution: port.Attribution{BillingAccountID: "acct-bench"},
			Reconcile:   !async, ReconcileAsync: async,
		}
		b.StartTimer()
		res, err := sb.Run(ctx, req)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if async {
			if u, err := res.Reconciling.Wait(ctx); err != nil || u.Total.Calls != 1 {
				b.Fatalf("usage %+v, %v", u, err)
			}
		} else if res.Usage.Total.Calls != 1 {
			b.Fatalf("usage %+v", res.Usage)
		}
	}
	for _, c := range []struct {
		name  string
		async bool
	}{{"sync", false}, {"async", true}} {
		b.Run(c.name, func(b *testing.B) {
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				run(b, c.async)
			}
		})
	}
}
