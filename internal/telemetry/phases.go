package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Phases is a sandbox's lifecycle (create, start, wait; or claim, start, wait) as
// consecutive child spans of the span in the runner's context, made with that
// span's own provider: a runner needs no tracer option, and records nothing when
// its caller traces nothing.
type Phases struct {
	ctx   context.Context
	tr    trace.Tracer
	attrs []attribute.KeyValue
	cur   trace.Span
}

// StartPhases starts the first phase, first, under ctx's span; attrs go on every
// phase.
func StartPhases(ctx context.Context, first string, attrs ...attribute.KeyValue) *Phases {
	p := &Phases{ctx: ctx, tr: trace.SpanFromContext(ctx).TracerProvider().Tracer(ScopeName), attrs: attrs}
	p.Next(first)
	return p
}

// Next ends the current phase and starts the next, name.
func (p *Phases) Next(name string) {
	if p.cur != nil {
		p.cur.End()
	}
	_, p.cur = p.tr.Start(p.ctx, name, trace.WithAttributes(p.attrs...))
}

// End ends the current phase. It is idempotent.
func (p *Phases) End() {
	if p.cur != nil {
		p.cur.End()
		p.cur = nil
	}
}
