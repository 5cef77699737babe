package containerd

import (
	"go.opentelemetry.io/otel/metric"

	"github.com/agentsandbox/sandbox/internal/telemetry"
)

// WithMeterProvider sets where the runner's metrics go (default: the global
// provider): sandbox.pool.claims by claim (warm: a pooled sandbox; cold: a pool
// found empty), sandbox.pool.ready (each pool's ready sandboxes) and
// sandbox.sessions.live (the sessions this runner holds a handle to). Spans need no option: a run's create, start and wait (or claim,
// start and wait) are children of the span in RunOnce's context, made by that
// span's provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error { return telemetry.SetMeter(&c.tel, mp) }
}

// Owner returns the owner label value of the resources this runner creates.
func (r *Runner) Owner() string { return r.cfg.owner }

// Owner returns the owner label value of the pool's runner.
func (p *Pool) Owner() string { return p.r.cfg.owner }
