package containerd

import (
	"context"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentsandbox/sandbox/port"
)

// TestPoolTelemetry: a pool's ready sandboxes are a gauge while it lives; a warm
// and a cold claim are counted; a pooled run's spans are claim, start, wait under
// the caller's span, a cold run's create, start, wait. About 3 s.
func TestPoolTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	r, image := poolEnv(t, "pool-otel", WithMeterProvider(mp))
	spec := suiteSpec(image)
	spec.Argv = []string{"/agent", "echo", "o", "e"}
	ctx := context.Background()
	p, err := r.NewPool(ctx, port.TemplateOf(spec), port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	waitReady(t, p)
	collect := func() (ready int64, claims map[string]int64) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		ready, claims = -1, map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Gauge[int64]:
					if m.Name == "sandbox.pool.ready" && len(d.DataPoints) == 1 {
						ready = d.DataPoints[0].Value
					}
				case metricdata.Sum[int64]:
					for _, dp := range d.DataPoints {
						c, _ := dp.Attributes.Value("sandbox.pool.claim")
						claims[c.Emit()] += dp.Value
					}
				}
			}
		}
		return ready, claims
	}
	if ready, _ := collect(); ready != 1 {
		t.Fatalf("ready gauge %d, want 1", ready)
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	run := func(id string) []string {
		spans.Reset()
		sctx, span := tp.Tracer("t").Start(ctx, "run")
		s := spec
		s.RunID = id
		if res, err := p.RunOnce(sctx, s); err != nil || res.ExitCode != 0 {
			t.Fatalf("run %s: %v %+v", id, err, res)
		}
		span.End()
		var names []string
		for _, sp := range spans.GetSpans() {
			// containerd's client adds spans of its own beside ours.
			if strings.HasPrefix(sp.Name, "sandbox.") && sp.Parent.SpanID() == span.SpanContext().SpanID() {
				names = append(names, sp.Name)
			}
		}
		return names
	}
	if got := run("otel-warm"); len(got) != 3 || got[0] != "sandbox.claim" || got[1] != "sandbox.start" || got[2] != "sandbox.wait" {
		t.Errorf("warm run spans %v", got)
	}
	// The pool refills in the background: the second run is cold unless it won.
	if got := run("otel-second"); len(got) != 3 || (got[0] != "sandbox.create" && got[0] != "sandbox.claim") || got[2] != "sandbox.wait" {
		t.Errorf("second run spans %v", got)
	}
	_, claims := collect()
	if claims["warm"] < 1 || claims["warm"]+claims["cold"] != 2 {
		t.Errorf("claims %v", claims)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ready, _ := collect(); ready != -1 {
		t.Errorf("a closed pool is still observed: %d", ready)
	}
}
