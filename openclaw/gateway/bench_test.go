package gateway_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/openclaw/gateway/gatewaytest"
)

// BenchmarkAgentStream measures the client's event path for a long streamed run:
// 10,000 chat delta events per run, decoded, filtered and delivered as updates.
// It reports events/s and allocations per event (the double's encoding runs in
// the same process and is included in allocs; see allocs/event for the total).
func BenchmarkAgentStream(b *testing.B) {
	const events = 10_000
	// Frames are encoded once so the double spends little time per event.
	srv := gatewaytest.NewServer(gatewaytest.WithHandler(func(c *gatewaytest.Conn) {
		for {
			r, err := c.Next(context.Background())
			if err != nil {
				return
			}
			run, err := c.Accept(r)
			if err != nil {
				return
			}
			frame := []byte(`{"type":"event","event":"chat","seq":1,"payload":{"runId":"` + run.RunID +
				`","sessionKey":"` + run.SessionKey + `","seq":1,"state":"delta","deltaText":"token ",` +
				`"message":{"role":"assistant","content":[{"type":"text","text":"token token token"}]}}}`)
			other := []byte(`{"type":"event","event":"chat","seq":2,"payload":{"runId":"other","sessionKey":"agent:main:other","seq":1,"state":"delta","deltaText":"x"}}`)
			for i := range events {
				if i%10 == 0 {
					_ = c.Send(other) // foreign traffic to filter out
				}
				_ = c.Send(frame)
			}
			_ = run.Finish("ok", "done")
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	c, err := gateway.Dial(ctx, srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		run, err := c.Agent(ctx, gateway.AgentRequest{Message: "go", SessionKey: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for u := range run.Updates(ctx) {
			if u.Kind == gateway.UpdateText {
				n++
			}
		}
		if _, err := run.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		if n != events {
			b.Fatalf("got %d text updates, want %d", n, events)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	total := float64(b.N) * events
	b.ReportMetric(total/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/event")
}
