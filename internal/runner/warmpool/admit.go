package warmpool

import (
	"fmt"
	"log/slog"

	"github.com/agentsandbox/sandbox/port"
)

// Admission is what a runner tells Admit about itself when it is asked for a pool.
type Admission struct {
	// Bridge says the runner has the bridge, its slots' stub.
	Bridge bool
	// LateMounts says the runtime's sandboxes see host mounts made after they start,
	// as a claim needs for the run's workspace, mounts and LLM socket.
	LateMounts bool
	// Runtime names the runtime in the refusal when it does not.
	Runtime string
	// Check checks a run of the template as the runner checks runs.
	Check func(port.RunSpec) error
	// DefaultRefill is PoolOptions.RefillConcurrency's default.
	DefaultRefill int
}

// Admit is every runner's check of a pool request: it returns tmpl ready to pool (a
// pooled sandbox has no time limit of its own: each run brings its own) and opts
// with their defaults, or why the runner cannot pool it: port.ErrUnsupported
// without the bridge or for mounts the runtime would not see; the template's or the
// options' port.ErrInvalidSpec.
func Admit(tmpl port.PoolTemplate, opts port.PoolOptions, a Admission) (port.PoolTemplate, port.PoolOptions, error) {
	if !a.Bridge {
		return tmpl, opts, fmt.Errorf("%w: warm pools need the bridge (WithBridge) as the sandboxes' stub", port.ErrUnsupported)
	}
	tmpl.Limits.Timeout = 0
	if (tmpl.Workspace || tmpl.LLM || len(tmpl.Mounts) > 0) && !a.LateMounts {
		return tmpl, opts, fmt.Errorf("%w: runtime %s does not see host mounts made after a sandbox starts: it can pool only templates without a workspace, mounts or LLM socket", port.ErrUnsupported, a.Runtime)
	}
	if err := a.Check(tmpl.Spec("pool-template")); err != nil {
		return tmpl, opts, err
	}
	opts, err := CheckOptions(opts, a.DefaultRefill)
	return tmpl, opts, err
}

// Sized is the keeper's configuration for a pool of tmpl's key with opts (checked by
// Admit); the runner adds how its sandboxes are made and removed.
func Sized[S any](tmpl port.PoolTemplate, opts port.PoolOptions, log *slog.Logger) Config[S] {
	return Config[S]{Key: tmpl.Key(), Size: opts.Size, Concurrency: opts.RefillConcurrency, BetweenRuns: opts.RefillBetweenRuns, Logger: log}
}
