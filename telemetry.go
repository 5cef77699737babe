package sandbox

import (
	"context"
	"path"
	"reflect"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
)

// WithTracerProvider sets where runs' traces go (default: the global provider,
// otel.GetTracerProvider, a no-op unless the host installed an SDK). A run is one
// trace: the span "sandbox.run" with child spans for the workspace check, the
// clone, the proxy's start and stop, the sandbox (the runner adds its create,
// start and wait), each egress request, the reconciliation and the export and
// push. The proxy adds a span per LLM call when it runs in this process and was
// given the same provider (inprocproxy.WithTracerProvider); it sends that span's W3C
// traceparent upstream, so LiteLLM's spans join the run's trace.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Sandbox) error {
		if tp == nil {
			return port.Invalidf("tracer provider is nil")
		}
		s.tp = tp
		return nil
	}
}

// WithMeterProvider sets where runs' metrics go (default: the global provider,
// otel.GetMeterProvider): sandbox.runs and sandbox.run.duration by outcome,
// runtime and error class (error.type: timeout, oom_killed, invalid_spec, ...), sandbox.reconcile.calls by state (found, missing) and
// sandbox.egress.requests by outcome and rule. The LLM call metrics
// (gen_ai.client.operation.duration, gen_ai.client.token.usage,
// sandbox.llm.calls, sandbox.llm.refusals) come from the proxy.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *Sandbox) error {
		if mp == nil {
			return port.Invalidf("meter provider is nil")
		}
		s.mp = mp
		return nil
	}
}

// runtimeOf names the runner for telemetry: its adapter's package ("docker",
// "containerd", "nomad") and the OCI runtime it reports ("containerd/runsc").
func runtimeOf(r port.SandboxRunner) string {
	t := reflect.TypeOf(r)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	name := path.Base(t.PkgPath())
	if rr, ok := r.(port.RuntimeReporter); ok {
		if rt := path.Base(rr.Runtime()); rt != "" && rt != "." && rt != "/" {
			name += "/" + rt
		}
	}
	return name
}

// startRun starts the run's span.
func (s *Sandbox) startRun(ctx context.Context, req Request) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		telemetry.RunID.String(req.RunID), telemetry.RunAttempt.Int(req.Attempt), telemetry.Runtime.String(s.runtime),
	}
	if o, ok := s.runner.(interface{ Owner() string }); ok {
		attrs = append(attrs, telemetry.Owner.String(o.Owner()))
	}
	if req.Model != "" {
		attrs = append(attrs, telemetry.GenAIRequestModel.String(req.Model))
	}
	return s.tel.Tracer.Start(ctx, "sandbox.run", trace.WithAttributes(attrs...))
}

// endRun ends the run's span and records its metrics.
func (s *Sandbox) endRun(ctx context.Context, span trace.Span, start time.Time, res *Result, err error) {
	outcome := telemetry.OutcomeOK
	if err != nil {
		outcome = telemetry.OutcomeFailed
	}
	attrs := []attribute.KeyValue{telemetry.Outcome.String(outcome)}
	if res != nil {
		attrs = append(attrs, attribute.Int("sandbox.llm.calls", len(res.Audit)), attribute.Int("sandbox.llm.refused", len(res.Policy.Blocked)))
		if res.Run != nil {
			attrs = append(attrs, attribute.Int("sandbox.exit_code", res.Run.ExitCode))
			if res.Run.ErrorCode != "" {
				attrs = append(attrs, attribute.String("sandbox.error_code", string(res.Run.ErrorCode)))
			}
		}
	}
	span.SetAttributes(attrs...)
	if err != nil {
		span.SetStatus(codes.Error, telemetry.ErrorClass(err))
		span.SetAttributes(telemetry.ErrorType.String(telemetry.ErrorClass(err)))
	}
	span.End()
	s.tel.Run(context.WithoutCancel(ctx), outcome, s.runtime, telemetry.ErrorClass(err), time.Since(start))
}

// traced runs f in a child span of ctx's named name.
func (s *Sandbox) traced(ctx context.Context, name string, f func(context.Context) error) error {
	ctx, span := s.tel.Tracer.Start(ctx, name)
	err := f(ctx)
	telemetry.End(span, err)
	return err
}

// traceEgress makes each egress record of the run a span under the run's span, and
// counts it, before the host's own callback sees it.
func (s *Sandbox) traceEgress(ctx context.Context, p *port.EgressPolicy) {
	if p == nil {
		return
	}
	next := p.OnAudit
	parent := trace.SpanContextFromContext(ctx)
	p.OnAudit = func(rec port.EgressRecord) {
		_, span := s.tel.Tracer.Start(trace.ContextWithSpanContext(context.Background(), parent), "egress "+rec.Method,
			trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(rec.Time), trace.WithAttributes(
				telemetry.RunID.String(rec.RunID), telemetry.EgressHost.String(rec.Host),
				attribute.String("sandbox.egress.mode", rec.Mode), attribute.String("sandbox.egress.provider", rec.Provider),
				telemetry.HTTPStatusCode.Int(rec.Status)))
		if rec.Guard != "" {
			span.SetAttributes(telemetry.RefusalRule.String(rec.Guard), telemetry.Outcome.String(telemetry.OutcomeRefused))
			span.SetStatus(codes.Error, "refused: "+telemetry.RuleOf(rec.Guard))
		} else if rec.Error != "" {
			span.SetStatus(codes.Error, "error")
		}
		span.End(trace.WithTimestamp(rec.Time.Add(rec.Latency)))
		s.tel.Egress(context.Background(), rec.Guard)
		if next != nil {
			next(rec)
		}
	}
}
