package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
)

// BenchmarkRealGatewayAgent measures what the client adds to a run on the real
// gateway: per run, the client's wall time from sending `agent` to the final
// result, against the gateway's own run duration for the same prompt
// (result.meta.durationMs). One connection, a fresh session per run.
func BenchmarkRealGatewayAgent(b *testing.B) {
	gw, _ := startRealGateway(b)
	ctx := context.Background()
	c, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var client, server, overhead []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		marker := fmt.Sprintf("BENCH%c%c", 'A'+i/26%26, 'A'+i%26)
		start := time.Now()
		r, err := c.Agent(ctx, gateway.AgentRequest{
			Message:    "Reply with the code word only. MARKER=" + marker,
			SessionKey: fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i),
			Timeout:    90 * time.Second,
		})
		if err != nil {
			b.Fatal(err)
		}
		res, err := r.Wait(ctx)
		took := time.Since(start)
		if err != nil || res.Text != "ANSWER-"+marker {
			b.Fatalf("run %d: %v %q", i, err, res.Text)
		}
		var meta struct {
			DurationMs int64 `json:"durationMs"`
		}
		if err := json.Unmarshal(res.Meta, &meta); err != nil || meta.DurationMs <= 0 {
			b.Fatalf("result meta without a duration: %s", res.Meta)
		}
		own := time.Duration(meta.DurationMs) * time.Millisecond
		client, server, overhead = append(client, took), append(server, own), append(overhead, took-own)
	}
	b.StopTimer()
	c50 := benchutil.Report(b, "client", client)
	s50 := benchutil.Report(b, "gateway", server)
	benchutil.Report(b, "overhead", overhead)
	benchutil.Ratio(b, "client/gateway-p50", c50, s50)
}
