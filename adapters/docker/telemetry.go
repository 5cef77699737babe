package docker

import (
	"go.opentelemetry.io/otel/metric"

	"github.com/agentsandbox/sandbox/internal/telemetry"
)

// WithMeterProvider sets where the runner's metrics go (default: the global
// provider): sandbox.sessions.live, the sessions this runner holds a handle to.
// Spans need no option: a run's create, start and wait are children of the span in
// RunOnce's context, made by that span's provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return only(ctorRunner, "WithMeterProvider", func(c *config) error { return telemetry.SetMeter(&c.tel, mp) })
}
