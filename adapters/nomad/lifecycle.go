package nomad

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// oneShot is a one-shot run's Nomad steps (runner.Steps): a batch job registered
// (Nomad places and starts it), its allocation followed to its end, its output,
// audit and workspace gathered, and the job purged.
type oneShot struct {
	r *Runner

	proxy      *Proxy
	js         jobSpec
	log        *slog.Logger
	evalID     string
	allocID    string
	alloc      *api.Allocation
	finishLive func(*port.RunResult)

	tPlaced, tFinished, tCollected time.Time
}

var _ runner.Steps = (*oneShot)(nil)

func (s *oneShot) Validate(ctx context.Context, spec port.RunSpec) (port.RunSpec, error) {
	// A runner alone has no pre-booted sandbox: Preload runs cold (its mounts kept).
	spec = spec.WithDefaults().ColdSpec()
	var err error
	if s.proxy, err = s.r.check(spec); err != nil {
		return spec, err
	}
	return spec, ctx.Err()
}

// Image does nothing: the client node pulls the image when it starts the task.
func (s *oneShot) Image(context.Context, *runner.Run) error { return nil }

func (s *oneShot) Create(ctx context.Context, run *runner.Run) (err error) {
	r, spec := s.r, run.Spec
	if s.js, err = r.jobSpecOf(spec, s.proxy != nil, run.Start); err != nil {
		return err
	}
	job := r.buildJob(spec, s.js)
	s.log = r.cfg.logger.With(logattr.RunID, spec.RunID, "job", s.js.id)
	// Cleanup is registered before anything is created, and runs with a fresh
	// context so a cancelled caller (or a panic) cannot leak the job or the key.
	run.Defer(func() {
		r.cleanup(context.WithoutCancel(ctx), s.js.id, s.alloc, s.proxy != nil, s.log)
		if !s.tCollected.IsZero() {
			s.log.Debug("run phases", "placed", s.tPlaced.Sub(run.Start), "finished", s.tFinished.Sub(s.tPlaced),
				"collected", s.tCollected.Sub(s.tFinished), "cleaned", time.Since(s.tCollected))
		}
	})
	s.evalID, err = r.register(ctx, s.js.id, job, s.proxy)
	var refused *registerError
	if errors.As(err, &refused) && !errors.Is(err, port.ErrUnavailable) && ctx.Err() == nil {
		return runner.Fail(port.CodeContainerFailed, err)
	} else if err != nil {
		return err
	}
	s.log.Debug("job registered", "eval", s.evalID)
	return nil
}

// Attach does nothing yet: the live output attaches to the allocation once it is
// placed (Wait).
func (s *oneShot) Attach(context.Context, *runner.Run) error { return nil }

// Start does nothing: the registered job starts where Nomad places it.
func (s *oneShot) Start(context.Context, *runner.Run) error { return nil }

func (s *oneShot) Wait(ctx, runCtx context.Context, run *runner.Run) error {
	r := s.r
	var err error
	s.allocID, err = r.placed(runCtx, s.evalID)
	s.finishLive = once(r.startLive(ctx, s.allocID, run.Spec))
	run.Defer(func() { s.finishLive(nil) })
	if err == nil && s.proxy != nil {
		s.proxy.attach(s.allocID)
		run.Defer(s.proxy.detach)
	}
	s.tPlaced = time.Now()
	if err == nil {
		s.alloc, err = r.finished(runCtx, s.allocID)
	}
	s.tFinished = time.Now()
	if errors.Is(err, ErrNodeLost) {
		// Nothing on that node answers: no kill, no output but what live writers had
		// (the clean-up stops the job and keeps it for Nomad to reconcile).
		s.alloc = nil
		return runner.Fail(port.CodeInternal, err)
	}
	if err != nil {
		if runCtx.Err() != nil {
			return err // the time limit or the caller ended the run: Stop
		}
		if errors.Is(err, errNotPlaced) {
			return runner.Fail(port.CodeContainerFailed, err)
		}
		return runner.Fail(port.CodeInternal, err)
	}
	outErr, copyErr := r.gather(ctx, s.alloc, run.Spec, s.js, run.Result, s.proxy, s.finishLive)
	if copyErr != nil {
		return runner.Fail(port.CodeInternal, fmt.Errorf("copying the workspace back: %w", copyErr))
	}
	s.tCollected = time.Now()
	run.Result.Duration = time.Since(run.Start)
	if outErr != nil {
		run.Result.ExitCode = terminatedExitCode(s.alloc, run.Result.ExitCode)
		return runner.Fail(port.CodeInternal, outErr)
	}
	return nil
}

// Stop kills the run where it is and gathers what it left.
func (s *oneShot) Stop(ctx context.Context, run *runner.Run) error {
	if s.allocID != "" {
		s.alloc = s.r.kill(ctx, s.allocID, s.js.copyWorkspace, s.log)
	}
	if s.alloc != nil {
		_, _ = s.r.gather(ctx, s.alloc, run.Spec, s.js, run.Result, s.proxy, s.finishLive)
		s.tCollected = time.Now()
	}
	return runner.Fail(port.CodeTimeout, runner.DeadlineCause(ctx, run.Spec.Limits.Timeout))
}

func (s *oneShot) Classify(ctx context.Context, run *runner.Run) (port.ErrorCode, error) {
	return s.r.outcome(s.alloc, run.Spec, run.Result)
}
