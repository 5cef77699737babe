package llmproxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// TestCallTelemetry: a forwarded call is a client span, child of the run's span,
// with the GenAI attributes read from the response (plain and streamed); a refused
// call is a span with its rule; the upstream gets the proxy's traceparent, never
// the agent's trace headers or baggage; the metrics count both.
func TestCallTelemetry(t *testing.T) {
	var mu sync.Mutex
	var upHeaders []http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		upHeaders = append(upHeaders, r.Header.Clone())
		mu.Unlock()
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"id\":\"s1\",\"model\":\"m-2024\",\"choices\":[]}\n\n")
			io.WriteString(w, "data: {\"id\":\"s1\",\"model\":\"m-2024\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\n")
			io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-litellm-call-id", "call-1")
		io.WriteString(w, `{"id":"chatcmpl-1","model":"m-2024","usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}`)
	}))
	defer up.Close()

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tel := telemetry.New(tp, mp)

	u, _ := url.Parse(up.URL)
	e, err := NewEngine(Config{Upstream: u, Transport: NewTransport(), MaxRequestBytes: 1 << 20, Telemetry: tel})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := proxypolicy.NewPolicy(port.ProxySpec{RunID: "r1", APIKey: "sk-canary-otel", Attribution: port.Attribution{BillingAccountID: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, runSpan := tp.Tracer("test").Start(context.Background(), "run")
	m := NewMeter(MeterConfig{RunID: "r1", Policy: pol, Budget: port.Budget{MaxCalls: 2}, Trace: runSpan.SpanContext()})
	agentTrace := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	call := func(body string) int {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Traceparent", agentTrace)
		r.Header.Set("Baggage", "tenant=other")
		r.Header.Set("Tracestate", "x=y")
		w := httptest.NewRecorder()
		m.Enter()
		e.Forward(w, r, m, r.URL.Path)
		return w.Code
	}
	if c := call(`{"model":"m","messages":[]}`); c != 200 {
		t.Fatalf("plain call: %d", c)
	}
	if c := call(`{"model":"m","messages":[],"stream":true}`); c != 200 {
		t.Fatalf("streamed call: %d", c)
	}
	if c := call(`{"model":"m","messages":[]}`); c != 429 {
		t.Fatalf("call over budget: %d", c)
	}
	runSpan.End()
	_ = runCtx

	got := spans.GetSpans()
	if len(got) != 4 {
		t.Fatalf("%d spans, want 3 calls and the run", len(got))
	}
	runID := runSpan.SpanContext().TraceID()
	for i, want := range []struct {
		in, out int64
		status  int
	}{{11, 5, 200}, {7, 3, 200}, {0, 0, 429}} {
		s := got[i]
		a := attrs(s.Attributes)
		if s.Name != "chat m" || s.SpanKind != trace.SpanKindClient || s.Parent.SpanID() != runSpan.SpanContext().SpanID() || s.SpanContext.TraceID() != runID {
			t.Errorf("span %d: name %q kind %v parent %v", i, s.Name, s.SpanKind, s.Parent.SpanID())
		}
		if a["gen_ai.operation.name"] != "chat" || a["gen_ai.request.model"] != "m" || a["sandbox.run.id"] != "r1" || a["http.response.status_code"] != itoa(want.status) {
			t.Errorf("span %d attributes %v", i, a)
		}
		if want.status == 200 && (a["gen_ai.response.model"] != "m-2024" || a["gen_ai.usage.input_tokens"] != itoa(want.in) || a["gen_ai.usage.output_tokens"] != itoa(want.out)) {
			t.Errorf("span %d GenAI usage %v", i, a)
		}
		if want.status == 429 && (a["sandbox.refusal.rule"] != "budget_exceeded: max_calls" || s.Status.Code.String() != "Error") {
			t.Errorf("refused span %v status %v", a, s.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(upHeaders) != 2 {
		t.Fatalf("upstream saw %d calls", len(upHeaders))
	}
	for i, h := range upHeaders {
		tp := h.Get("Traceparent")
		want := got[i].SpanContext
		if tp == agentTrace || !strings.Contains(tp, want.TraceID().String()) || !strings.Contains(tp, want.SpanID().String()) {
			t.Errorf("upstream traceparent %q, want the call span %v", tp, want.SpanID())
		}
		if h.Get("Baggage") != "" || h.Get("Tracestate") != "" {
			t.Errorf("agent's baggage or tracestate passed: %v", h)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					k := md.Name
					for _, kv := range p.Attributes.ToSlice() {
						k += " " + string(kv.Key) + "=" + kv.Value.Emit()
					}
					sums[k] += p.Value
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					tt, _ := p.Attributes.Value("gen_ai.token.type")
					sums[md.Name+" "+tt.Emit()] += p.Sum
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					sums[md.Name] += int64(p.Count)
				}
			}
		}
	}
	for k, want := range map[string]int64{
		"sandbox.llm.calls sandbox.outcome=ok":                      2,
		"sandbox.llm.calls sandbox.outcome=refused":                 1,
		"sandbox.llm.refusals sandbox.refusal.rule=budget_exceeded": 1,
		"gen_ai.client.token.usage input":                           18,
		"gen_ai.client.token.usage output":                          8,
		"gen_ai.client.operation.duration":                          2,
	} {
		if sums[k] != want {
			t.Errorf("%s = %d, want %d (all: %v)", k, sums[k], want, sums)
		}
	}
}

func attrs(kvs []attribute.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

func itoa[N int | int64](n N) string { return strconv.FormatInt(int64(n), 10) }
