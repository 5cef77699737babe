package llmproxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/sandbox/internal/inert"
	"github.com/agentsandbox/sandbox/internal/telemetry"
)

// A call's telemetry: one client span per call, child of the run's span when the
// front knows it (MeterConfig.Trace), and the GenAI client metrics. The agent's own
// trace headers are ignored: it must not choose where its calls appear.

// genAIOperations maps a route's path suffix to its operation as the GenAI
// conventions name it and the provider API it speaks; the first match wins.
var genAIOperations = []struct{ suffix, op, provider string }{
	{"/chat/completions", "chat", "openai"},
	{"/completions", "text_completion", "openai"},
	{"/embeddings", "embeddings", "openai"},
	{"/responses", "chat", "openai"},
	{"/messages", "chat", "anthropic"},
	{"/moderations", "moderations", "openai"},
}

// genAIOperation names a route's operation as the GenAI conventions do, and the
// provider API it speaks.
func genAIOperation(path string) (op, provider string) {
	for _, o := range genAIOperations {
		if strings.HasSuffix(path, o.suffix) {
			return o.op, o.provider
		}
	}
	if strings.HasPrefix(path, "/v1/models") {
		return "models", "openai"
	}
	return "other", "openai" // a refused path off the allowlist
}

// startSpan starts c's span and returns the request context carrying it.
func (e *Engine) startSpan(r *http.Request, c *Call) context.Context {
	ctx := r.Context()
	// The parent is the run's span, never anything the request carried (an invalid
	// one makes a new trace).
	ctx = trace.ContextWithSpanContext(ctx, c.meter.cfg.Trace)
	ctx, c.span = e.tel.Tracer.Start(ctx, "llm.call", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(c.start), trace.WithAttributes(
			telemetry.RunID.String(c.meter.cfg.RunID), telemetry.RunAttempt.Int(c.meter.cfg.Attempt)))
	return ctx
}

// observe ends c's span and records its metrics; ref is the refusal of a call that
// was not forwarded.
func (e *Engine) observe(c *Call, ref *Refusal, usage GenAIUsage) {
	if c.span == nil {
		return
	}
	rec := &c.rec
	op, provider := genAIOperation(rec.Path)
	span := c.span
	if rec.Model != "" {
		span.SetName(op + " " + rec.Model)
	} else {
		span.SetName(op)
	}
	attrs := []attribute.KeyValue{
		telemetry.GenAIOperationName.String(op), telemetry.GenAIProviderName.String(provider),
		telemetry.HTTPStatusCode.Int(rec.Status),
	}
	if rec.Model != "" {
		attrs = append(attrs, telemetry.GenAIRequestModel.String(rec.Model))
	}
	if ref != nil {
		rule := telemetry.RuleOf(ref.Blocked)
		span.SetAttributes(append(attrs, telemetry.RefusalRule.String(ref.Blocked), telemetry.Outcome.String(telemetry.OutcomeRefused))...)
		span.SetStatus(codes.Error, "refused: "+rule)
		span.End()
		ctx := context.Background()
		e.tel.LLMCall(ctx, telemetry.OutcomeRefused, rule)
		return
	}
	if usage.Model != "" {
		attrs = append(attrs, telemetry.GenAIResponseModel.String(inert.String(usage.Model)))
	}
	if rec.RequestID != "" {
		attrs = append(attrs, telemetry.GenAIResponseID.String(rec.RequestID))
	}
	if rec.CallID != "" {
		attrs = append(attrs, telemetry.LLMCallID.String(rec.CallID))
	}
	attrs = append(attrs, telemetry.GenAIUsageInputTokens.Int64(usage.Input), telemetry.GenAIUsageOutputTokens.Int64(usage.Output),
		telemetry.Streamed.Bool(rec.Streamed))
	outcome := telemetry.OutcomeOK
	var errType string
	switch {
	case rec.Error != "":
		outcome, errType = telemetry.OutcomeError, Clip(firstWord(rec.Error), 48)
	case rec.Status < 200 || rec.Status >= 300:
		outcome, errType = telemetry.OutcomeError, strconv.Itoa(rec.Status)
	}
	attrs = append(attrs, telemetry.Outcome.String(outcome))
	if errType != "" {
		attrs = append(attrs, telemetry.ErrorType.String(errType))
		span.SetStatus(codes.Error, errType)
	}
	span.SetAttributes(attrs...)
	span.End(trace.WithTimestamp(c.start.Add(rec.Latency)))

	// Metric attributes: a model name only when the upstream accepted the call (so
	// an agent cannot mint series), never the run.
	ctx := context.Background()
	e.tel.GenAICall(ctx, rec.Latency, op, provider, rec.Model, inert.String(usage.Model), errType, usage.Input, usage.Output)
	e.tel.LLMCall(ctx, outcome, "")
}

// firstWord is the class of an audit error ("upstream: ...", "stream: ...").
func firstWord(s string) string {
	if i := strings.IndexAny(s, ": "); i > 0 {
		return s[:i]
	}
	return s
}
