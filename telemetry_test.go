package sandbox

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentsandbox/sandbox/port"
)

// liveEgressProxy plays the proxy's egress front: it writes two live egress
// records (one refused by the SSRF guard) through the policy's OnAudit.
type liveEgressProxy struct{ egressFakeProxy }

func (f *liveEgressProxy) Start(ctx context.Context, spec port.ProxySpec) (port.Proxy, error) {
	_, _ = f.egressFakeProxy.Start(ctx, spec)
	now := time.Now()
	spec.Egress.OnAudit(port.EgressRecord{Time: now, RunID: spec.RunID, Mode: "mitm", Method: "GET", Host: "api.github.com", Status: 200, Latency: time.Millisecond})
	spec.Egress.OnAudit(port.EgressRecord{Time: now, RunID: spec.RunID, Mode: "forward", Method: "GET", Host: "169.254.169.254", Status: 403, Guard: "ssrf: link-local"})
	return f, nil
}

// TestRunTelemetryWithFakes: the facade's own spans and metrics, including each
// egress request as a span under the run (with its guard) and a failed run's
// outcome; the host's own egress callback still sees every record.
func TestRunTelemetryWithFakes(t *testing.T) {
	if _, err := New(&fakeRunner{}, WithTracerProvider(nil)); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("nil tracer provider: %v", err)
	}
	if _, err := New(&fakeRunner{}, WithMeterProvider(nil)); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("nil meter provider: %v", err)
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	creds := port.CredentialFunc(func(context.Context, string, string, string) (string, error) { return "v", nil })
	var live int
	r := &fakeRunner{res: &port.RunResult{ExitCode: 0}}
	s, err := New(r, WithLLM(LLM{Proxy: &liveEgressProxy{}, Upstream: "http://127.0.0.1:4000", APIKey: "k"}),
		WithEgress(creds, func(port.EgressRecord) { live++ }), WithTracerProvider(tp), WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	req := request(t)
	req.Egress = &port.EgressPolicy{Providers: []port.EgressProvider{{ID: "gh", URIs: []string{"https://api.github.com/"}, Credentials: []string{"token"}}}}
	if _, err := s.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	r.err = port.ErrOOMKilled
	if _, err := s.Run(context.Background(), req); !errors.Is(err, port.ErrOOMKilled) {
		t.Fatalf("failed run: %v", err)
	}
	if live != 4 {
		t.Errorf("the host's egress callback saw %d records, want 4", live)
	}
	got := spans.GetSpans()
	var runs []tracetest.SpanStub
	egress := 0
	for _, sp := range got {
		if sp.Name == "sandbox.run" {
			runs = append(runs, sp)
		}
	}
	if len(runs) != 2 {
		t.Fatalf("%d run spans", len(runs))
	}
	for _, sp := range got {
		if sp.Name != "egress GET" {
			continue
		}
		egress++
		a := attrsOf(sp)
		if sp.Parent.SpanID() != runs[0].SpanContext.SpanID() && sp.Parent.SpanID() != runs[1].SpanContext.SpanID() {
			t.Errorf("egress span outside a run: %+v", sp.Parent)
		}
		if a["sandbox.egress.host"] == "169.254.169.254" && (a["sandbox.refusal.rule"] != "ssrf: link-local" || sp.Status.Code.String() != "Error") {
			t.Errorf("refused egress span %v %v", a, sp.Status)
		}
	}
	if egress != 4 {
		t.Errorf("%d egress spans, want 4", egress)
	}
	if a := attrsOf(runs[1]); a["sandbox.outcome"] != "failed" || a["error.type"] != "oom_killed" || a["sandbox.runtime"] != "sandbox" {
		t.Errorf("failed run span %v", a)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range d.DataPoints {
					o, _ := p.Attributes.Value("sandbox.outcome")
					counts[m.Name+" "+o.Emit()] += p.Value
					if e, ok := p.Attributes.Value("error.type"); ok {
						counts[m.Name+" error.type="+e.Emit()] += p.Value
					}
				}
			}
		}
	}
	if counts["sandbox.runs ok"] != 1 || counts["sandbox.runs failed"] != 1 || counts["sandbox.runs error.type=oom_killed"] != 1 || counts["sandbox.egress.requests ok"] != 2 || counts["sandbox.egress.requests refused"] != 2 {
		t.Errorf("metrics %v", counts)
	}
}

func attrsOf(s tracetest.SpanStub) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}
