// Package telemetry holds the library's OpenTelemetry instruments: the tracer, the
// GenAI client metrics of the semantic conventions and the sandbox's own metrics.
//
// The library uses the OpenTelemetry API only. Without a provider it uses the global
// ones, which are no-ops until the host installs an SDK; the host owns exporters,
// sampling and resources.
//
// Nothing secret is ever an attribute: run ids, owners, runtimes, models, rules and
// outcomes are. Metric attributes are low-cardinality only (no run id); a model name
// is a metric attribute only once the upstream accepted it, so an agent cannot mint
// series by inventing model names.
package telemetry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsandbox/sandbox/errdefs"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every tracer and meter of the library.
const ScopeName = "github.com/agentsandbox/sandbox"

// Attribute keys. The gen_ai.* ones are the OpenTelemetry GenAI semantic conventions;
// sandbox.* are the library's own.
const (
	GenAIOperationName     = attribute.Key("gen_ai.operation.name")
	GenAIProviderName      = attribute.Key("gen_ai.provider.name")
	GenAIRequestModel      = attribute.Key("gen_ai.request.model")
	GenAIResponseModel     = attribute.Key("gen_ai.response.model")
	GenAIResponseID        = attribute.Key("gen_ai.response.id")
	GenAIUsageInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	GenAIUsageOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	GenAITokenType         = attribute.Key("gen_ai.token.type")
	ErrorType              = attribute.Key("error.type")
	HTTPStatusCode         = attribute.Key("http.response.status_code")
	ServerAddress          = attribute.Key("server.address")

	RunID          = attribute.Key("sandbox.run.id")
	RunAttempt     = attribute.Key("sandbox.run.attempt")
	Owner          = attribute.Key("sandbox.owner")
	Runtime        = attribute.Key("sandbox.runtime")
	Outcome        = attribute.Key("sandbox.outcome")
	RefusalRule    = attribute.Key("sandbox.refusal.rule")
	LLMCallID      = attribute.Key("sandbox.llm.call_id")
	Streamed       = attribute.Key("sandbox.llm.streamed")
	EgressHost     = attribute.Key("sandbox.egress.host")
	PoolClaim      = attribute.Key("sandbox.pool.claim")
	ReconcileState = attribute.Key("sandbox.reconcile.state")
)

// Outcomes of a run or a call (the sandbox.outcome attribute).
const (
	OutcomeOK      = "ok"
	OutcomeFailed  = "failed"
	OutcomeRefused = "refused"
	OutcomeError   = "error"
)

// T is a tracer and the instruments made from one pair of providers. The zero value
// is not usable; New and Default make one. A T is safe for concurrent use.
type T struct {
	Tracer trace.Tracer

	opDuration  metric.Float64Histogram
	tokenUsage  metric.Int64Histogram
	llmCalls    metric.Int64Counter
	refusals    metric.Int64Counter
	runs        metric.Int64Counter
	runDuration metric.Float64Histogram
	reconciled  metric.Int64Counter
	egress      metric.Int64Counter
	poolClaims  metric.Int64Counter
	sessions    metric.Int64UpDownCounter

	sets  sync.Map // setKey -> metric.MeasurementOption
	nsets atomic.Int64

	poolsMu sync.Mutex
	pools   map[*poolObs]struct{}
}

type poolObs struct {
	attrs metric.ObserveOption
	ready func() int64
}

// Bucket boundaries the GenAI conventions advise for their two histograms.
var (
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	runBuckets      = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
)

// SetMeter is a runner's WithMeterProvider: New(nil, mp) into *dst. A nil mp is
// refused (the global provider is the default, not an option).
func SetMeter(dst **T, mp metric.MeterProvider) error {
	if mp == nil {
		return errdefs.Invalidf("meter provider is nil")
	}
	*dst = New(nil, mp)
	return nil
}

// New makes the instruments from tp and mp; a nil provider means the global one
// (otel.GetTracerProvider, otel.GetMeterProvider), which forwards to whatever the
// host installs later.
func New(tp trace.TracerProvider, mp metric.MeterProvider) *T {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	t := &T{Tracer: tp.Tracer(ScopeName)}
	// The API returns a working no-op instrument with any error: telemetry never
	// stops a run.
	t.opDuration, _ = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("GenAI operation duration."), metric.WithExplicitBucketBoundaries(durationBuckets...))
	t.tokenUsage, _ = m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Number of input and output tokens used."), metric.WithExplicitBucketBoundaries(tokenBuckets...))
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, _ := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return c
	}
	t.llmCalls = counter("sandbox.llm.calls", "{call}", "LLM calls that reached a sandbox proxy, by outcome (ok, error, refused).")
	t.refusals = counter("sandbox.llm.refusals", "{call}", "LLM calls a sandbox proxy refused itself, by rule (budget, route, body, attestation, ...).")
	t.runs = counter("sandbox.runs", "{run}", "Sandboxed runs finished, by outcome and runtime.")
	t.runDuration, _ = m.Float64Histogram("sandbox.run.duration", metric.WithUnit("s"),
		metric.WithDescription("Wall time of a sandboxed run, by outcome and runtime."), metric.WithExplicitBucketBoundaries(runBuckets...))
	t.reconciled = counter("sandbox.reconcile.calls", "{call}", "Audited LLM calls after reconciliation against the billing system, by state (found, missing).")
	t.egress = counter("sandbox.egress.requests", "{request}", "Egress requests of sandboxes, by outcome and refusal rule.")
	t.poolClaims = counter("sandbox.pool.claims", "{claim}", "Runs started by runtime and claim (warm: a pre-started pool slot; cold: created for the run).")
	t.sessions, _ = m.Int64UpDownCounter("sandbox.sessions.live", metric.WithUnit("{session}"),
		metric.WithDescription("Long-running sandbox sessions this process holds a handle to (started or attached, not ended or detached), by runtime."))
	t.pools = map[*poolObs]struct{}{}
	ready, _ := m.Int64ObservableGauge("sandbox.pool.ready", metric.WithUnit("{sandbox}"),
		metric.WithDescription("Sandboxes ready to claim in a warm pool, by runtime and pool."))
	_, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.poolsMu.Lock()
		defer t.poolsMu.Unlock()
		for p := range t.pools {
			o.ObserveInt64(ready, p.ready(), p.attrs)
		}
		return nil
	}, ready)
	return t
}

// ObservePool reports a warm pool's ready sandboxes (ready is read at each
// collection) until the returned function is called.
func (t *T) ObservePool(runtime, key string, ready func() int64) (stop func()) {
	p := &poolObs{attrs: metric.WithAttributes(Runtime.String(runtime), attribute.String("sandbox.pool", key)), ready: ready}
	t.poolsMu.Lock()
	t.pools[p] = struct{}{}
	t.poolsMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.poolsMu.Lock()
			delete(t.pools, p)
			t.poolsMu.Unlock()
		})
	}
}

var def = sync.OnceValue(func() *T { return New(nil, nil) })

// Default is the T of the global providers.
func Default() *T { return def() }

// Or returns t, or Default when t is nil.
func Or(t *T) *T {
	if t == nil {
		return Default()
	}
	return t
}

// Run records a finished run; errType is ErrorClass of its error ("" when it
// succeeded).
func (t *T) Run(ctx context.Context, outcome, runtime, errType string, d time.Duration) {
	kv := []attribute.KeyValue{Outcome.String(outcome), Runtime.String(runtime)}
	if errType != "" {
		kv = append(kv, ErrorType.String(errType))
	}
	set := metric.WithAttributeSet(attribute.NewSet(kv...))
	t.runs.Add(ctx, 1, set)
	t.runDuration.Record(ctx, d.Seconds(), set)
}

// LLMCall counts a call that reached a proxy; rule is set for a refused one.
func (t *T) LLMCall(ctx context.Context, outcome, rule string) {
	t.llmCalls.Add(ctx, 1, t.cached(setKey{kind: "call", a: outcome}, func() []attribute.KeyValue {
		return []attribute.KeyValue{Outcome.String(outcome)}
	}))
	if rule != "" {
		t.refusals.Add(ctx, 1, t.cached(setKey{kind: "rule", a: rule}, func() []attribute.KeyValue {
			return []attribute.KeyValue{RefusalRule.String(rule)}
		}))
	}
}

// GenAICall records gen_ai.client.operation.duration and, when reported,
// gen_ai.client.token.usage (input and output) of one call. errType is set for a
// failed call (its models are then not attributes: see the package doc).
func (t *T) GenAICall(ctx context.Context, d time.Duration, op, provider, reqModel, respModel, errType string, input, output int64) {
	k := setKey{kind: "genai", a: op, b: provider, c: reqModel, d: respModel, e: errType}
	base := func() []attribute.KeyValue {
		kv := []attribute.KeyValue{GenAIOperationName.String(op), GenAIProviderName.String(provider)}
		if errType != "" {
			return append(kv, ErrorType.String(errType))
		}
		return append(kv, GenAIRequestModel.String(reqModel), GenAIResponseModel.String(respModel))
	}
	t.opDuration.Record(ctx, d.Seconds(), t.cached(k, base))
	if errType != "" {
		return
	}
	if input > 0 {
		k.f = "input"
		t.tokenUsage.Record(ctx, input, t.cached(k, func() []attribute.KeyValue { return append(base(), GenAITokenType.String("input")) }))
	}
	if output > 0 {
		k.f = "output"
		t.tokenUsage.Record(ctx, output, t.cached(k, func() []attribute.KeyValue { return append(base(), GenAITokenType.String("output")) }))
	}
}

// setKey names a metric attribute set; the sets of calls repeat (a few models,
// outcomes and rules), so each is built once: building one per call was most of
// the cost telemetry added to a call.
type setKey struct{ kind, a, b, c, d, e, f string }

// maxCachedSets bounds the cache; past it sets are built per call.
const maxCachedSets = 4096

func (t *T) cached(k setKey, kvs func() []attribute.KeyValue) metric.MeasurementOption {
	if v, ok := t.sets.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(kvs()...))
	if t.nsets.Add(1) <= maxCachedSets {
		t.sets.Store(k, o)
	}
	return o
}

// Reconciled records a reconciliation: found calls and missing ones.
func (t *T) Reconciled(ctx context.Context, found, missing int) {
	if found > 0 {
		t.reconciled.Add(ctx, int64(found), metric.WithAttributes(ReconcileState.String("found")))
	}
	if missing > 0 {
		t.reconciled.Add(ctx, int64(missing), metric.WithAttributes(ReconcileState.String("missing")))
	}
}

// Egress records one egress request; rule is its refusal rule, "" when allowed.
func (t *T) Egress(ctx context.Context, rule string) {
	outcome := OutcomeOK
	if rule != "" {
		outcome = OutcomeRefused
	}
	t.egress.Add(ctx, 1, metric.WithAttributes(Outcome.String(outcome), RefusalRule.String(RuleOf(rule))))
}

// PoolClaim records how a run's sandbox was started: warm (from a pool) or cold.
func (t *T) PoolClaim(ctx context.Context, runtime string, warm bool) {
	claim := "cold"
	if warm {
		claim = "warm"
	}
	t.poolClaims.Add(ctx, 1, metric.WithAttributes(Runtime.String(runtime), PoolClaim.String(claim)))
}

// SessionHeld counts a session handle of runtime and returns the function that
// uncounts it (call it once, when the session ends or is detached).
func (t *T) SessionHeld(runtime string) (released func()) {
	attrs := metric.WithAttributes(Runtime.String(runtime))
	t.sessions.Add(context.Background(), 1, attrs)
	return func() { t.sessions.Add(context.Background(), -1, attrs) }
}

// RuleOf is a refusal's rule as a metric attribute: its text up to the first colon
// (the proxy's rules are a fixed set: "budget_exceeded", "route_not_allowed", ...),
// clipped, so a detail never mints a series.
func RuleOf(blocked string) string {
	if i := strings.IndexByte(blocked, ':'); i >= 0 {
		blocked = blocked[:i]
	}
	if len(blocked) > 48 {
		blocked = blocked[:48]
	}
	return blocked
}

// End ends span with outcome: an error status with err's type when err is set.
func End(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, ErrorClass(err))
		span.SetAttributes(ErrorType.String(ErrorClass(err)))
	}
	span.End()
}

// ErrorClass names an error for the error.type attribute by its class only (a
// message may quote a path or a prompt): the errdefs sentinel it wraps, a context
// error, or "error".
func ErrorClass(err error) string {
	if err == nil {
		return ""
	}
	for _, c := range errorClasses {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "error"
}

var errorClasses = []struct {
	err  error
	name string
}{
	{context.Canceled, "canceled"}, {context.DeadlineExceeded, "deadline_exceeded"},
	{errdefs.ErrTimeout, "timeout"}, {errdefs.ErrOOMKilled, "oom_killed"},
	{errdefs.ErrContainerFailed, "container_failed"}, {errdefs.ErrBudgetExceeded, "budget_exceeded"},
	{errdefs.ErrUnattributed, "unattributed"}, {errdefs.ErrInvalidSpec, "invalid_spec"},
	{errdefs.ErrNotFound, "not_found"}, {errdefs.ErrUnavailable, "unavailable"},
	{errdefs.ErrUnsupported, "unsupported"}, {errdefs.ErrClosed, "closed"},
	{errdefs.ErrRejected, "rejected"}, {errdefs.ErrPermissionDenied, "permission_denied"},
	{errdefs.ErrConflict, "conflict"}, {errdefs.ErrInternal, "internal"},
}

// propagator is W3C trace context only: the proxy sends its own traceparent
// upstream, never the agent's, and never baggage.
var propagator = propagation.TraceContext{}

// InjectTraceContext removes any traceparent, tracestate and baggage from h and
// sets the trace context of ctx's span (nothing when it has none).
func InjectTraceContext(ctx context.Context, h http.Header) {
	for _, k := range []string{"Traceparent", "Tracestate", "Baggage"} {
		h.Del(k)
	}
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}
