package warmpool

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/bgclean"
	"github.com/agentsandbox/sandbox/internal/runner/cgroupmem"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/internal/runner/slotmount"
	"github.com/agentsandbox/sandbox/port"
)

// Labels of a pooled sandbox, besides the usual ones (the adapters export them).
const (
	// LabelPool is the key of the template a pooled sandbox was made for.
	LabelPool = port.LabelPrefix + "pool"
	// LabelSlotDir is a pooled sandbox's host directory (its mount points).
	LabelSlotDir = port.LabelPrefix + "slot-dir"
)

// Steps are what a pool leaves to its runtime: how a sandbox is made, watched, run
// in and removed. The adapter fills them; Pool does the rest. S is the adapter's
// slot, E what its sandbox's end channel carries.
type Steps[S Slotted, E any] struct {
	// Slot begins a slot (its Dir set) and returns it with the suffix of its pool
	// run ID ("pool-" + suffix).
	Slot func() (s S, suffix string)
	// Image looks up the template's image for s, before anything is made.
	Image func(ctx context.Context, s S) error
	// Make creates (and, as the runtime does, starts) s's sandbox of spec with
	// labels and the stub as its process; its output goes to s's switches.
	Make func(ctx context.Context, s S, spec port.RunSpec, labels map[string]string, stub Stub) error
	// Exit is the channel s's sandbox's end comes on, once.
	Exit func(s S) <-chan E
	// Code is the exit code an end carries.
	Code func(E) int
	// Destroy removes a sandbox whatever its state.
	Destroy func(S)
	// Fits says whether a run of the template's shape can still take a pooled
	// sandbox (nil: every one can).
	Fits func(port.RunSpec) bool
	// Check checks a run as the runner checks runs.
	Check func(context.Context, port.RunSpec) error
	// Cold runs a run on the runner (its cold path).
	Cold func(context.Context, port.RunSpec) (*port.RunResult, error)
	// Run runs the claimed run c in s: it sets c.Log, starts the claim (Claim.Begin)
	// and waits for the run's end. The pool removes s after it.
	Run func(ctx context.Context, c *Claim, s S) (*Result, error)
	// Claimed is told whether a run of the pool's shape found a ready sandbox (nil:
	// nothing to tell).
	Claimed func(ctx context.Context, warm bool)
	// Closed runs once when the pool closes, after its refills stop: the runner
	// forgets the pool there.
	Closed func()
}

// Slotted is an adapter's slot: it embeds Slot.
type Slotted interface {
	Common() *Slot
}

// Slot is what every pooled sandbox has, whatever its runtime; an adapter's slot
// embeds it.
type Slot struct {
	// Dir is the slot's host directory: its mount points.
	Dir string
	// Stdout and Stderr are the sandbox's output, the run's once claimed.
	Stdout, Stderr *SwitchWriter
	// Attestation is what the stub reported once its pre-booted runtime was ready
	// (nil without Preload).
	Attestation *port.Attestation
	// Exited says the sandbox's exit was seen.
	Exited atomic.Bool
	// Mem is the sandbox's memory cgroup, sampled from the claim.
	Mem cgroupmem.Paths
	// Lease is the slot's own run lease (its pool label's run ID) from creation,
	// RunLease the claiming run's from the claim, both held until the slot is
	// removed, so another process's Sweep of the owner leaves a live pool's
	// sandboxes alone.
	Lease, RunLease *runlease.Lease
}

// Common returns s: how the pool reaches the Slot an adapter's slot embeds.
func (s *Slot) Common() *Slot { return s }

// ReleaseLeases gives up the slot's leases: it is gone, or a Sweep may have what
// is left.
func (s *Slot) ReleaseLeases() {
	s.Lease.Release()
	s.RunLease.Release()
}

// Removed ends the removal of a slot whose sandbox is gone: the mounts on its
// directory and the directory (what fails stays for Sweep), then its leases.
func (s *Slot) Removed(log *slog.Logger) {
	if err := slotmount.RemoveDir(s.Dir); err != nil {
		log.Error("removing a pooled sandbox's directory failed; a Sweep will retry", "dir", s.Dir, logattr.Err, err)
	}
	s.ReleaseLeases()
}

// Host is what a runner tells NewPool about itself.
type Host[S Slotted, E any] struct {
	Admission
	Steps[S, E]
	// Engine names the runner in errors' operations ("docker": docker.WarmPool).
	Engine string
	// Supported says the host can pool at all (it has Linux mount propagation).
	Supported bool
	// Owner owns the pool's sandboxes (their labels and leases).
	Owner string
	// Bridge is the bridge's path in a sandbox: the stub.
	Bridge string
	// Base is the parent of the pool's life (Keeper.Ctx).
	Base context.Context
	// CleanupTimeout bounds a sandbox's creation once begun, even when the pool
	// closes meanwhile.
	CleanupTimeout time.Duration
	// Cleanup is the runner's queue of background removals.
	Cleanup *bgclean.Queue
	// Logger takes the failures of the pool's refills.
	Logger *slog.Logger
}

// Pool is the part of a Docker or containerd warm pool that does not depend on the
// runtime: the request's admission, the keeper, a slot's making around the runtime's
// own create, the routing of a run to a ready sandbox or the cold path, the counters,
// and Close. The adapter's pool wraps it.
type Pool[S Slotted, E any] struct {
	tmpl    port.PoolTemplate
	key     string
	size    int
	k       *Keeper[S]
	steps   Steps[S, E]
	engine  string
	owner   string
	bridge  string
	timeout time.Duration
	cleanup *bgclean.Queue
}

// NewPool admits a pool request (Admit) and returns its pool, not filling yet (see
// Start). A host that cannot pool is port.ErrUnsupported; errors are the runner's
// *port.OpError of WarmPool.
func NewPool[S Slotted, E any](tmpl port.PoolTemplate, opts port.PoolOptions, h Host[S, E]) (*Pool[S, E], error) {
	if !h.Supported {
		return nil, runner.OpErr(h.Engine+".WarmPool", "", fmt.Errorf("%w: warm pools need Linux mount propagation", port.ErrUnsupported))
	}
	tmpl, opts, err := Admit(tmpl, opts, h.Admission)
	if err != nil {
		return nil, runner.OpErr(h.Engine+".WarmPool", "", err)
	}
	p := &Pool[S, E]{tmpl: tmpl, key: tmpl.Key(), size: opts.Size, steps: h.Steps, engine: h.Engine,
		owner: h.Owner, bridge: h.Bridge, timeout: h.CleanupTimeout, cleanup: h.Cleanup}
	cfg := Sized[S](tmpl, opts, h.Logger)
	cfg.New, cfg.Destroy, cfg.Discard = p.newSlot, h.Destroy, p.discard
	p.k = New(h.Base, cfg)
	return p, nil
}

// Start starts filling the pool once the runner has recorded it (add; false: the
// runner is closed, and the pool is refused with port.ErrUnavailable).
func (p *Pool[S, E]) Start(add func() bool) error {
	if !add() {
		p.k.Stop()
		return runner.OpErr(p.engine+".WarmPool", "", fmt.Errorf("%w: the runner is closed", port.ErrUnavailable))
	}
	p.k.Start()
	return nil
}

// Template implements port.Pool.
func (p *Pool[S, E]) Template() port.PoolTemplate { return p.tmpl }

// Stats implements port.Pool.
func (p *Pool[S, E]) Stats() port.PoolStats { return p.k.Stats() }

// Key is the template's key.
func (p *Pool[S, E]) Key() string { return p.key }

// Size is the number of sandboxes the pool keeps ready.
func (p *Pool[S, E]) Size() int { return p.size }

// Ready is the queue of sandboxes ready for a claim.
func (p *Pool[S, E]) Ready() chan S { return p.k.Ready }

// Ctx is the pool's life (Keeper.Ctx).
func (p *Pool[S, E]) Ctx() context.Context { return p.k.Ctx() }

// discard removes s in the background.
func (p *Pool[S, E]) discard(s S) { p.cleanup.Go(func() { p.steps.Destroy(s) }) }

// newSlot makes one ready sandbox of the template: its slot directories, lease and
// labels around the runtime's Make, then (with a pre-booted runtime) the wait for
// the stub's status. It runs to the end even when the pool closes meanwhile (bounded
// by the cleanup timeout), and leaves nothing behind when it fails.
func (p *Pool[S, E]) newSlot() (_ S, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.k.Ctx()), p.timeout)
	defer cancel()
	s, suffix := p.steps.Slot()
	c := s.Common()
	defer func() {
		if err != nil {
			p.steps.Destroy(s) // the slot as far as it got
		}
	}()
	var none S
	if err := p.steps.Image(ctx, s); err != nil {
		return none, err
	}
	spec := p.tmpl.Spec("pool-" + suffix)
	if c.Lease, err = HoldLease(p.owner, spec.RunID, runlease.KindSlot); err != nil {
		return none, err
	}
	if err := MakeSlotDirs(c.Dir, &spec); err != nil {
		return none, err
	}
	lbls := runner.ResourceLabels(p.owner, spec.RunID, port.KindPool, map[string]string{LabelPool: p.key, LabelSlotDir: c.Dir}, time.Now())
	stub := NewStub(p.bridge, p.tmpl.Preload)
	c.Stdout, c.Stderr = &SwitchWriter{}, &SwitchWriter{}
	if stub.Status != nil {
		c.Stdout.Set(stub.Status)
	}
	// The runtime's own mounts (Preload.Mounts) are there from the start, read-only.
	if err := p.steps.Make(ctx, s, spec.ColdSpec(), lbls, stub); err != nil {
		return none, err
	}
	if stub.Status != nil {
		// Ready only once the runtime is: the stub's status line, or its end.
		att, exited, err := AwaitReady(p.k.Ctx(), stub, p.steps.Exit(s))
		if err != nil {
			c.Exited.Store(exited)
			return none, err
		}
		c.Attestation = att
	}
	return s, nil
}

// endedBeforeClaim reports whether s's sandbox ended before its claim (killed from
// outside, say), marking it exited and counting it (Keeper.EndedBeforeClaim).
func (p *Pool[S, E]) endedBeforeClaim(s S) bool {
	select {
	case st := <-p.steps.Exit(s):
		s.Common().Exited.Store(true)
		p.k.EndedBeforeClaim(p.tmpl.Preload != nil, p.steps.Code(st))
		return true
	default:
		return false
	}
}

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
func (p *Pool[S, E]) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
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
	s, ok := p.k.Take(p.endedBeforeClaim)
	if !ok {
		p.k.Cold.Add(1)
		p.claimed(ctx, false)
		return Cold(ctx, p.steps.Cold, spec, "the pool was empty")
	}
	p.k.Warm.Add(1)
	defer p.k.Done()
	p.claimed(ctx, true)
	c := p.claim(spec, s.Common())
	res, err := p.steps.Run(ctx, c, s)
	// The slot is single-use whatever happened: removed once the run and its naming
	// are over.
	p.cleanup.Go(func() {
		c.named.Wait()
		p.steps.Destroy(s)
	})
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

// claimed tells Steps.Claimed, when given, whether a run found a ready sandbox.
func (p *Pool[S, E]) claimed(ctx context.Context, warm bool) {
	if p.steps.Claimed != nil {
		p.steps.Claimed(ctx, warm)
	}
}

// Close is port.Pool's Close: no more refills, ready sandboxes removed, used ones'
// removals waited for (until ctx ends). Runs in progress finish. Closing again does
// nothing.
func (p *Pool[S, E]) Close(ctx context.Context) error {
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
