package integration

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestTelemetryDocker(t *testing.T)     { testTelemetry(t, dockerRunner, "docker") }
func TestTelemetryContainerd(t *testing.T) { testTelemetry(t, containerdRunner, "containerd") }

// testTelemetry runs one facade run on a real runtime with the OTel SDK's
// in-memory exporter and manual reader: an allowed call (with the agent's own
// traceparent and baggage), a refused one, reconciliation. It asserts the span tree,
// the GenAI attributes, the traceparent LiteLLM received, the metrics, and that the
// canary key is in no span, attribute, metric label or log. About 5 s per runtime.
func testTelemetry(t *testing.T, newRunner runnerFunc, runtime string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const canary = "sk-canary-telemetry-5f2a9c71"
	const agentTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin)

	var mu sync.Mutex
	var upstream []map[string]string
	fake := litellmtest.NewServer(litellmtest.WithMasterKey(canary), litellmtest.WithReply(func(r litellmtest.ChatRequest) litellmtest.Reply {
		mu.Lock()
		upstream = append(upstream, map[string]string{"traceparent": r.Header.Get("Traceparent"), "baggage": r.Header.Get("Baggage"), "tracestate": r.Header.Get("Tracestate")})
		mu.Unlock()
		return litellmtest.Reply{Content: "ok"}
	}))
	defer fake.Close()

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	logs := &otelLogs{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	base, err := os.MkdirTemp("", "otel-proxy")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	proxies, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(testenv.Owner("e2e")), inprocproxy.WithSandboxUID(1001),
		inprocproxy.WithTracerProvider(tp), inprocproxy.WithMeterProvider(mp), inprocproxy.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer proxies.Shutdown(context.Background())
	lc, err := litellm.New(litellm.WithBaseURL(fake.URL), litellm.WithMasterKey(fake.MasterKey()))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := litellmspend.NewReconciler(lc, litellmspend.WithPollInterval(100*time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(runner, sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: fake.URL, APIKey: canary}),
		sandbox.WithReconciler(rec), sandbox.WithTracerProvider(tp), sandbox.WithMeterProvider(mp), sandbox.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}

	ws := newWorkspace(t)
	hdr := [][2]string{{"Content-Type", "application/json"}, {"Traceparent", agentTrace}, {"Tracestate", "agent=1"}, {"Baggage", "tenant=someone-else"}}
	var lines []string
	for _, r := range []map[string]any{
		{"method": "POST", "path": "/v1/chat/completions", "headers": hdr, "body": `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`},
		{"method": "GET", "path": "/v1/files", "headers": hdr, "body": ""},
	} {
		b, _ := json.Marshal(r)
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(filepath.Join(ws, "reqs.jsonl"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	runID := sandboxtest.RunID("otel")
	res, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: image,
		Argv: []string{"/agent", "reqs", "/workspace/reqs.jsonl"}, WorkspaceDir: ws, Model: "gpt-4o-mini",
		Attribution: port.Attribution{BillingAccountID: "acct-otel"}, Reconcile: true,
		Limits: port.Limits{Timeout: time.Minute, MemoryBytes: 128 << 20},
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if out := string(res.Run.Stdout); !strings.Contains(out, "req 0 status 200") || !strings.Contains(out, "req 1 status 404") {
		t.Fatalf("agent output %q", out)
	}
	if res.Usage == nil || res.Usage.Total.Calls != 1 || len(res.Usage.Missing) != 0 {
		t.Fatalf("usage %+v", res.Usage)
	}
	// Records are kept in the order calls ended: the chat's can end after the refusal
	// that followed it (the agent reads only the status line before its next call).
	var chatRec port.AuditRecord
	for _, a := range res.Audit {
		if a.Path == "/v1/chat/completions" {
			chatRec = a
		}
	}

	// The span tree.
	got := spans.GetSpans()
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range got {
		byName[s.Name] = append(byName[s.Name], s)
	}
	one := func(name string) tracetest.SpanStub {
		t.Helper()
		if len(byName[name]) != 1 {
			var names []string
			for _, s := range got {
				names = append(names, s.Name)
			}
			t.Fatalf("%d spans named %q; all: %v", len(byName[name]), name, names)
		}
		return byName[name][0]
	}
	run := one("sandbox.run")
	ra := attrMap(run.Attributes)
	if run.Parent.IsValid() || ra["sandbox.run.id"] != runID || ra["sandbox.owner"] != testenv.Owner("e2e") || !strings.HasPrefix(ra["sandbox.runtime"], runtime) ||
		ra["sandbox.outcome"] != "ok" || ra["sandbox.llm.calls"] != "2" || ra["sandbox.llm.refused"] != "1" {
		t.Errorf("run span: parent %v attributes %v", run.Parent, ra)
	}
	childOf := func(s tracetest.SpanStub, parent tracetest.SpanStub) bool {
		return s.SpanContext.TraceID() == run.SpanContext.TraceID() && s.Parent.SpanID() == parent.SpanContext.SpanID()
	}
	for _, name := range []string{"sandbox.workspace.check", "sandbox.proxy.start", "sandbox.run_once", "sandbox.proxy.stop", "sandbox.reconcile", "chat gpt-4o-mini", "other"} {
		if s := one(name); !childOf(s, run) {
			t.Errorf("%s is not a child of the run span", name)
		}
	}
	once := one("sandbox.run_once")
	for _, name := range []string{"sandbox.create", "sandbox.start", "sandbox.wait"} {
		if s := one(name); !childOf(s, once) || attrMap(s.Attributes)["sandbox.runtime"] != runtime {
			t.Errorf("%s: not a child of sandbox.run_once, or attributes %v", name, attrMap(s.Attributes))
		}
	}
	if a := attrMap(one("sandbox.reconcile").Attributes); a["sandbox.reconcile.found"] != "1" || a["sandbox.reconcile.missing"] != "0" {
		t.Errorf("reconcile span %v", a)
	}
	call := one("chat gpt-4o-mini")
	ca := attrMap(call.Attributes)
	if ca["gen_ai.operation.name"] != "chat" || ca["gen_ai.request.model"] != "gpt-4o-mini" || ca["gen_ai.response.model"] == "" ||
		ca["gen_ai.usage.input_tokens"] == "0" || ca["gen_ai.usage.output_tokens"] == "0" || ca["sandbox.llm.call_id"] != chatRec.CallID || chatRec.CallID == "" ||
		ca["sandbox.run.id"] != runID || ca["http.response.status_code"] != "200" {
		t.Errorf("LLM call span %v (audit %+v)", ca, chatRec)
	}
	if ra := attrMap(one("other").Attributes); ra["sandbox.refusal.rule"] != "route_not_allowed" || ra["sandbox.outcome"] != "refused" {
		t.Errorf("refused call span %v", ra)
	}
	// LiteLLM got the call span's traceparent, not the agent's, and no baggage.
	mu.Lock()
	if len(upstream) != 1 || !strings.Contains(upstream[0]["traceparent"], call.SpanContext.TraceID().String()+"-"+call.SpanContext.SpanID().String()) ||
		upstream[0]["baggage"] != "" || upstream[0]["tracestate"] != "" {
		t.Errorf("upstream trace headers %v, want the call span %s", upstream, call.SpanContext.SpanID())
	}
	mu.Unlock()

	// The metrics.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	var labels []string
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			add := func(set attribute.Set, v float64) {
				k := md.Name
				for _, kv := range set.ToSlice() {
					k += " " + string(kv.Key) + "=" + kv.Value.Emit()
					labels = append(labels, kv.Value.Emit())
				}
				sums[k] += v
			}
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Value))
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Count))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Count))
				}
			}
		}
	}
	rt := ra["sandbox.runtime"]
	for k, want := range map[string]float64{
		"sandbox.runs sandbox.outcome=ok sandbox.runtime=" + rt:         1,
		"sandbox.run.duration sandbox.outcome=ok sandbox.runtime=" + rt: 1,
		"sandbox.llm.calls sandbox.outcome=ok":                          1,
		"sandbox.llm.calls sandbox.outcome=refused":                     1,
		"sandbox.llm.refusals sandbox.refusal.rule=route_not_allowed":   1,
		"sandbox.reconcile.calls sandbox.reconcile.state=found":         1,
	} {
		if sums[k] != want {
			t.Errorf("%s = %v, want %v", k, sums[k], want)
		}
	}
	var genai int
	for k := range sums {
		if strings.HasPrefix(k, "gen_ai.client.token.usage") || strings.HasPrefix(k, "gen_ai.client.operation.duration") {
			genai++
			if !strings.Contains(k, "gen_ai.request.model=gpt-4o-mini") || !strings.Contains(k, "gen_ai.operation.name=chat") {
				t.Errorf("GenAI metric without its model and operation: %s", k)
			}
		}
	}
	if genai != 3 { // duration, input tokens, output tokens
		t.Errorf("%d GenAI metric series, want 3: %v", genai, sums)
	}

	// The canary nowhere.
	var all strings.Builder
	for _, s := range got {
		b, _ := json.Marshal(s)
		all.Write(b)
	}
	all.WriteString(strings.Join(labels, " "))
	all.WriteString(logs.String())
	if strings.Contains(all.String(), canary) {
		t.Errorf("the key appears in spans, metric labels or logs")
	}
	if !strings.Contains(logs.String(), runID) {
		t.Errorf("the canary check read no logs")
	}
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

// otelLogs is a log sink the test scans for the canary.
type otelLogs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *otelLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *otelLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
