package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentsandbox/sandbox/errdefs"
)

func TestRuleOf(t *testing.T) {
	for in, want := range map[string]string{
		"budget_exceeded: max_calls": "budget_exceeded",
		"route_not_allowed":          "route_not_allowed",
		"":                           "",
		strings.Repeat("x", 100):     strings.Repeat("x", 48),
	} {
		if got := RuleOf(in); got != want {
			t.Errorf("RuleOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// ErrorClass names the class, never the message (which may quote a path).
func TestErrorClass(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("run r1: %w: /home/alice/secret", errdefs.ErrOOMKilled): "oom_killed",
		fmt.Errorf("x: %w", context.Canceled):                              "canceled",
		errors.New("something /home/alice"):                                "error",
		nil:                                                                "",
	} {
		if got := ErrorClass(err); got != want {
			t.Errorf("ErrorClass(%v) = %q, want %q", err, got, want)
		}
	}
}

// InjectTraceContext replaces whatever trace headers were there with ctx's span,
// and sends nothing (not the old ones) without a span.
func TestInjectTraceContext(t *testing.T) {
	h := http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, "Tracestate": {"a=b"}, "Baggage": {"k=v"}}
	InjectTraceContext(context.Background(), h)
	if len(h) != 0 {
		t.Errorf("without a span: %v", h)
	}
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	h = http.Header{"Baggage": {"k=v"}}
	InjectTraceContext(ctx, h)
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if h.Get("Traceparent") != want || h.Get("Baggage") != "" {
		t.Errorf("headers %v, want traceparent %s", h, want)
	}
}

// The attribute-set cache is bounded: past maxCachedSets, sets are built per call.
func TestCachedSetsBounded(t *testing.T) {
	tel := New(nil, nil)
	for i := range maxCachedSets + 10 {
		tel.LLMCall(context.Background(), OutcomeRefused, fmt.Sprintf("rule%d", i))
	}
	n := 0
	tel.sets.Range(func(any, any) bool { n++; return true })
	if n != maxCachedSets {
		t.Errorf("%d sets cached, want %d", n, maxCachedSets)
	}
}

// A pool is observed from ObservePool until its stop.
func TestObservePool(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel := New(nil, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	stop := tel.ObservePool("containerd", "k1", func() int64 { return 3 })
	points := func() int {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "sandbox.pool.ready" {
					if len(g.DataPoints) == 1 && g.DataPoints[0].Value != 3 {
						t.Errorf("value %d", g.DataPoints[0].Value)
					}
					return len(g.DataPoints)
				}
			}
		}
		return 0
	}
	if n := points(); n != 1 {
		t.Errorf("%d points while observed", n)
	}
	stop()
	stop()
	if n := points(); n != 0 {
		t.Errorf("%d points after stop", n)
	}
}
