package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
)

// A one-shot run (port.SandboxRunner.RunOnce) goes through the same steps on every
// runtime:
//
//	validate → image → create → attach → start → wait → classify → clean up
//
// Lifecycle walks them in that order; a runtime fills in Steps. What the steps share
// is here once: the result every failure returns, the run's time limit, when a wait
// that ended with the limit becomes a stop, and clean-up registered as soon as there
// is something to remove, run however the run ends (a panic included).

// Run is one run on its way through the lifecycle: the spec it runs, when it began,
// the result being filled in, and the clean-ups registered so far.
type Run struct {
	// Op names the operation in errors ("docker.RunOnce").
	Op string
	// Spec is the run's spec, with the runtime's defaults (Steps.Validate) and the
	// image it runs (Steps.Image).
	Spec port.RunSpec
	// Start is when the run began: once its image was ready (a pull is not the run's
	// time).
	Start time.Time
	// Result is the result every outcome returns, failures included (ExitCode -1
	// until the sandbox exits).
	Result *port.RunResult
	// Limit is the caller's context with the run's time limit, from Create on: the
	// limit bounds the whole run, so a step whose runtime can stop answering (a
	// frozen containerd shim) bounds its calls with it.
	Limit context.Context

	cleanups []func()
}

// Defer registers f to run when the run ends, after its result is in: the last one
// registered first, as defer does, and all of them even when one panics.
func (r *Run) Defer(f func()) { r.cleanups = append(r.cleanups, f) }

// Fail ends the run with code: the result so far, its duration set, and a
// *port.RunError with the cause in the run's *port.OpError.
func (r *Run) Fail(code port.ErrorCode, cause error) (*port.RunResult, error) {
	r.Result.ErrorCode = code
	r.Result.Duration = time.Since(r.Start)
	return r.Result, &port.OpError{Op: r.Op, RunID: r.Spec.RunID, Err: &port.RunError{Code: code, Err: cause}}
}

// Refuse ends the run without a result: the run did not happen (a spec refused, an
// engine unreachable, a caller that gave up before anything ran).
func (r *Run) Refuse(err error) (*port.RunResult, error) {
	return nil, &port.OpError{Op: r.Op, RunID: r.Spec.RunID, Err: err}
}

// end ends the run with a step's error: a *Failure with its code, anything else
// without a result.
func (r *Run) end(err error) (*port.RunResult, error) {
	if f, ok := err.(*Failure); ok {
		return r.Fail(f.Code, f.Err)
	}
	return r.Refuse(err)
}

// cleanUp runs the registered clean-ups, the last first, each even when a later one
// panicked.
func (r *Run) cleanUp() { runAll(r.cleanups) }

func runAll(fs []func()) {
	if len(fs) == 0 {
		return
	}
	defer runAll(fs[:len(fs)-1])
	fs[len(fs)-1]()
}

// Failure is a step's error that ends the run with a result and an error code
// (Run.Fail). Any other error a step returns ends the run without a result
// (Run.Refuse).
type Failure struct {
	Code port.ErrorCode
	Err  error
}

// Fail returns the *Failure of code and cause.
func Fail(code port.ErrorCode, cause error) error { return &Failure{Code: code, Err: cause} }

func (f *Failure) Error() string { return fmt.Sprintf("%s: %v", f.Code, f.Err) }

// Unwrap returns the cause.
func (f *Failure) Unwrap() error { return f.Err }

// Steps are one runtime's part of each step of a one-shot run. Lifecycle calls them
// in order, each only when the one before succeeded; the state a run needs from one
// step to the next is the Steps value's own (one per run).
type Steps interface {
	// Validate returns spec with the runtime's defaults, or why it cannot run here
	// (refused: nothing was created).
	Validate(ctx context.Context, spec port.RunSpec) (port.RunSpec, error)
	// Image makes run.Spec.Image ready to run (pulled by the policy, or checked to
	// be there); a runtime that leaves it to its nodes does nothing.
	Image(ctx context.Context, run *Run) error
	// Create creates the sandbox, not yet started, and registers its removal
	// (run.Defer) as soon as there is something to remove. Create, Attach and Start
	// may bound their calls with run.Limit; one that gave up at the limit returns
	// the run's CodeTimeout *Failure itself.
	Create(ctx context.Context, run *Run) error
	// Attach connects the sandbox's output and its exit before it starts, so that
	// nothing it writes and no fast exit is missed.
	Attach(ctx context.Context, run *Run) error
	// Start starts the sandbox.
	Start(ctx context.Context, run *Run) error
	// Wait waits until the sandbox ended (nil: its output is collected, its exit
	// known) or runCtx (ctx with the run's time limit) ended first (runCtx's error:
	// Lifecycle then calls Stop). A *Failure ends the run as it says.
	Wait(ctx, runCtx context.Context, run *Run) error
	// Stop ends a sandbox whose time limit passed or whose caller gave up: it kills
	// it, collects what it wrote, and returns the run's *Failure (CodeTimeout, with
	// DeadlineCause).
	Stop(ctx context.Context, run *Run) error
	// Classify turns the ended sandbox's exit into the run's outcome: an error code
	// and its cause, or "" when the run succeeded.
	Classify(ctx context.Context, run *Run) (port.ErrorCode, error)
}

// Traced is implemented by Steps whose runtime records a run's phases as spans
// (sandbox.create, sandbox.start, sandbox.wait), with Engine as their runtime
// attribute ("docker").
type Traced interface {
	Engine() string
}

// Lifecycle runs spec through s's steps and returns the run's result: nil with a
// *port.OpError when the run was refused before it began, else the result with a
// *port.OpError wrapping a *port.RunError when it failed. The clean-ups the steps
// registered run before it returns.
func Lifecycle(ctx context.Context, op string, spec port.RunSpec, s Steps) (res *port.RunResult, err error) {
	spec, err = s.Validate(ctx, spec)
	run := &Run{Op: op, Spec: spec, Start: time.Now(), Result: &port.RunResult{ExitCode: -1}}
	if err != nil {
		return run.Refuse(err)
	}
	defer run.cleanUp()
	if err := s.Image(ctx, run); err != nil {
		return run.end(err)
	}
	run.Start = time.Now()
	next := func(string) {}
	if t, ok := s.(Traced); ok {
		ph := telemetry.StartPhases(ctx, "sandbox.create", telemetry.Runtime.String(t.Engine()), telemetry.PoolClaim.String("cold"))
		defer ph.End()
		next = ph.Next
	}
	runCtx, cancel := context.WithTimeout(ctx, run.Spec.Limits.Timeout)
	defer cancel()
	run.Limit = runCtx
	if err := s.Create(ctx, run); err != nil {
		return run.end(err)
	}
	if err := s.Attach(ctx, run); err != nil {
		return run.end(err)
	}
	next("sandbox.start")
	if err := s.Start(ctx, run); err != nil {
		return run.end(err)
	}
	next("sandbox.wait")
	if err := s.Wait(ctx, runCtx, run); err != nil {
		if _, failed := err.(*Failure); !failed {
			err = s.Stop(ctx, run)
		}
		return run.end(err)
	}
	if code, cause := s.Classify(ctx, run); code != "" {
		return run.Fail(code, cause)
	}
	return run.Result, nil
}

// OpErr is err in a *port.OpError naming op (with its adapter: "docker.RunOnce") and
// the run; nil stays nil.
func OpErr(op, runID string, err error) error {
	if err == nil {
		return nil
	}
	return &port.OpError{Op: op, RunID: runID, Err: err}
}
