package docker

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestSessionsLiveMetric: sandbox.sessions.live counts the session while its handle
// is held, and not after Stop. About 2 s.
func TestSessionsLiveMetric(t *testing.T) {
	cli, image := dockerEnv(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("otel-sess")), WithBridge(testenv.Bridge(t)), WithSessionDir(t.TempDir()), WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Sweep(context.Background(), port.SweepOptions{})
	live := func() int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "sandbox.sessions.live" {
					var n int64
					for _, p := range d.DataPoints {
						n += p.Value
					}
					return n
				}
			}
		}
		return -1
	}
	ctx := context.Background()
	s, err := r.Start(ctx, port.SessionSpec{RunSpec: port.RunSpec{RunID: sandboxtest.RunID("otel-sess"), Image: image,
		Argv: []string{"/agent", "sleep", "60"}, Limits: port.Limits{Timeout: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := live(); n != 1 {
		t.Errorf("live sessions %d while one runs", n)
	}
	if _, err := s.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := live(); n != 0 {
		t.Errorf("live sessions %d after Stop", n)
	}
}
