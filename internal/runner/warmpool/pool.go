package warmpool

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/bgclean"
	"github.com/agentsandbox/sandbox/port"
)

// Steps are what a pool leaves to its runtime: how a sandbox is made, run in and
// removed. The adapter fills them; Pool does the rest.
type Steps[S any] struct {
	// New creates one ready sandbox (Config.New).
	New func() (S, error)
	// Destroy removes a sandbox whatever its state.
	Destroy func(S)
	// Ended reports, without blocking, whether s ended before its claim, and its
	// exit code then (marking it exited).
	Ended func(s S) (code int, ended bool)
	// Fits says whether a run of the template's shape can still take a pooled
	// sandbox (nil: every one can).
	Fits func(port.RunSpec) bool
	// Check checks a run as the runner checks runs.
	Check func(context.Context, port.RunSpec) error
	// Cold runs a run on the runner (its cold path).
	Cold func(context.Context, port.RunSpec) (*port.RunResult, error)
	// Run runs spec in the claimed sandbox s; the sandbox is the run's to remove.
	Run func(ctx context.Context, spec port.RunSpec, s S) (*Result, error)
	// Claimed is told whether a run of the pool's shape found a ready sandbox (nil:
	// nothing to tell).
	Claimed func(ctx context.Context, warm bool)
	// Closed runs once when the pool closes, after its refills stop: the runner
	// forgets the pool there.
	Closed func()
}

// Host is what a runner tells NewPool about itself.
type Host[S any] struct {
	Admission
	Steps[S]
	// Engine names the runner in errors' operations ("docker": docker.WarmPool).
	Engine string
	// Supported says the host can pool at all (it has Linux mount propagation).
	Supported bool
	// Base is the parent of the pool's life (Keeper.Ctx).
	Base    context.Context
	Cleanup *bgclean.Queue // where used sandboxes' removals queue
	Logger  *slog.Logger
}

// Pool is the part of a Docker or containerd warm pool that does not depend on the
// runtime: the request's admission, the keeper, the routing of a run to a ready
// sandbox or the cold path, the counters, and Close. The adapter's pool wraps it.
type Pool[S any] struct {
	tmpl    port.PoolTemplate
	key     string
	size    int
	k       *Keeper[S]
	steps   Steps[S]
	engine  string
	cleanup *bgclean.Queue
}

// NewPool admits a pool request (Admit) and returns its pool, not filling yet (see
// Start). A host that cannot pool is port.ErrUnsupported; errors are the runner's
// *port.OpError of WarmPool.
func NewPool[S any](tmpl port.PoolTemplate, opts port.PoolOptions, h Host[S]) (*Pool[S], error) {
	if !h.Supported {
		return nil, runner.OpErr(h.Engine+".WarmPool", "", fmt.Errorf("%w: warm pools need Linux mount propagation", port.ErrUnsupported))
	}
	tmpl, opts, err := Admit(tmpl, opts, h.Admission)
	if err != nil {
		return nil, runner.OpErr(h.Engine+".WarmPool", "", err)
	}
	p := &Pool[S]{tmpl: tmpl, key: tmpl.Key(), size: opts.Size, steps: h.Steps, engine: h.Engine, cleanup: h.Cleanup}
	cfg := Sized[S](tmpl, opts, h.Logger)
	cfg.New, cfg.Destroy, cfg.Discard = h.New, h.Destroy, p.discard
	p.k = New(h.Base, cfg)
	return p, nil
}

// Start starts filling the pool once the runner has recorded it (add; false: the
// runner is closed, and the pool is refused with port.ErrUnavailable).
func (p *Pool[S]) Start(add func() bool) error {
	if !add() {
		p.k.Stop()
		return runner.OpErr(p.engine+".WarmPool", "", fmt.Errorf("%w: the runner is closed", port.ErrUnavailable))
	}
	p.k.Start()
	return nil
}

// Template implements port.Pool.
func (p *Pool[S]) Template() port.PoolTemplate { return p.tmpl }

// Stats implements port.Pool.
func (p *Pool[S]) Stats() port.PoolStats { return p.k.Stats() }

// Key is the template's key.
func (p *Pool[S]) Key() string { return p.key }

// Size is the number of sandboxes the pool keeps ready.
func (p *Pool[S]) Size() int { return p.size }

// Ready is the queue of sandboxes ready for a claim.
func (p *Pool[S]) Ready() chan S { return p.k.Ready }

// Ctx is the pool's life (Keeper.Ctx).
func (p *Pool[S]) Ctx() context.Context { return p.k.Ctx() }

// discard removes s in the background.
func (p *Pool[S]) discard(s S) { p.cleanup.Go(func() { p.steps.Destroy(s) }) }

// Result is a pooled run's result, with what the pool needs to know of it.
type Result struct {
	*port.RunResult
	// Gone is the stub's PreloadGone reason: the pre-booted runtime died before
	// the claim.
	Gone string
	// Broken says why a sandbox not started yet could not be started at the claim.
	Broken string
}

// Ran is a pooled run's outcome as the pool takes it.
func Ran(res *port.RunResult, err error) (*Result, error) {
	return &Result{RunResult: res}, err
}

// RunOnce is port.SandboxRunner's RunOnce for the pool: a run of the pool's shape
// takes a ready sandbox, any other run (or one that finds the pool empty, or a
// sandbox that could not serve it) runs cold on the runner, its result saying why.
func (p *Pool[S]) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	spec = spec.WithDefaults()
	if !port.TemplateOf(spec).Equal(p.tmpl) || (p.steps.Fits != nil && !p.steps.Fits(spec)) {
		p.k.Other.Add(1)
		return Cold(ctx, p.steps.Cold, spec, "no pool of the run's shape")
	}
	if err := p.steps.Check(ctx, spec); err != nil {
		return nil, runner.OpErr(p.engine+".RunOnce", spec.RunID, err)
	}
	// A sandbox that ended before its claim (killed from outside, say) is no sandbox
	// to run in.
	s, ok := p.k.Take(func(s S) bool {
		code, ended := p.steps.Ended(s)
		if ended {
			p.k.EndedBeforeClaim(p.tmpl.Preload != nil, code)
		}
		return ended
	})
	if !ok {
		p.k.Cold.Add(1)
		p.claimed(ctx, false)
		return Cold(ctx, p.steps.Cold, spec, "the pool was empty")
	}
	p.k.Warm.Add(1)
	defer p.k.Done()
	p.claimed(ctx, true)
	res, err := p.steps.Run(ctx, spec, s)
	if res != nil && res.Broken != "" {
		// The sandbox could not be started at the claim: nothing of the run ran in
		// it, and it never will (it gets no claim). Run it cold, and say so.
		p.k.Failed.Add(1)
		return Cold(ctx, p.steps.Cold, spec, "the pooled sandbox could not be started at the claim: "+res.Broken)
	}
	if res != nil && res.Gone != "" {
		// The runtime died between its last check and the claim: nothing of the run
		// ran in the slot. Run it cold, and say so.
		p.k.PreloadFailed.Add(1)
		return Cold(ctx, p.steps.Cold, spec, "the pre-booted runtime was gone at the claim: "+res.Gone)
	}
	if res == nil {
		return nil, err
	}
	return res.RunResult, err
}

func (p *Pool[S]) claimed(ctx context.Context, warm bool) {
	if p.steps.Claimed != nil {
		p.steps.Claimed(ctx, warm)
	}
}

// Close is port.Pool's Close: no more refills, ready sandboxes removed, used ones'
// removals waited for (until ctx ends). Runs in progress finish. Closing again does
// nothing.
func (p *Pool[S]) Close(ctx context.Context) error {
	if !p.k.Stop() {
		return nil
	}
	if p.steps.Closed != nil {
		p.steps.Closed()
	}
	if err := Settle(ctx, p.k, p.cleanup); err != nil {
		return runner.OpErr(p.engine+".Pool.Close", "", err)
	}
	return nil
}
