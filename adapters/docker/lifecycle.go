package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/capture"
	"github.com/agentsandbox/sandbox/internal/runner/cgroupmem"
	"github.com/agentsandbox/sandbox/port"
)

// oneShot is a one-shot run's Docker steps (runner.Steps): a container created from
// the run's spec, attached, started, waited for and removed in the background.
type oneShot struct {
	r *Runner

	id      string
	log     *slog.Logger
	stderr  *capture.Buffer
	collect func()
	wait    client.ContainerWaitResult
	mem     *cgroupmem.Sampler
	status  int64
}

var (
	_ runner.Steps  = (*oneShot)(nil)
	_ runner.Traced = (*oneShot)(nil)
)

func (s *oneShot) Engine() string { return "docker" }

func (s *oneShot) Validate(ctx context.Context, spec port.RunSpec) (port.RunSpec, error) {
	// A runner alone has no pre-booted sandbox: Preload runs cold (its mounts kept).
	spec = spec.WithDefaults().ColdSpec()
	return spec, s.r.check(ctx, spec)
}

func (s *oneShot) Image(ctx context.Context, run *runner.Run) (err error) {
	run.Spec.Image, err = s.r.ensureImage(ctx, run.Spec.Image)
	return err
}

func (s *oneShot) Create(ctx context.Context, run *runner.Run) error {
	entrypoint, err := s.r.entrypoint(ctx, run.Spec)
	if err != nil {
		// A missing image: nothing was created, so no result.
		return err
	}
	id, lease, err := s.r.createHeld(ctx, run.Spec, entrypoint, run.Start)
	if err != nil {
		var le *leaseError
		if errors.As(err, &le) || errors.Is(err, port.ErrUnavailable) || errors.Is(err, port.ErrImageNotFound) || ctx.Err() != nil {
			return err
		}
		return runner.Fail(port.CodeContainerFailed, err)
	}
	// Registered before anything else can fail, and run with a fresh context so a
	// cancelled caller (or a panic unwinding through here) cannot leak the container;
	// in the background after the result is in (bounded; the container stays labelled
	// for Sweep until it is gone).
	run.Defer(func() {
		s.r.cleanup.Go(func() {
			s.r.remove(context.WithoutCancel(ctx), id, run.Spec.RunID)
			lease.Release()
		})
	})
	s.id = id
	s.log = s.r.cfg.logger.With(logattr.RunID, run.Spec.RunID, logattr.Container, short(id))
	s.log.Debug("container created")
	return nil
}

func (s *oneShot) Attach(ctx context.Context, run *runner.Run) error {
	att, err := s.r.cfg.api.ContainerAttach(ctx, s.id, client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		if run.Limit.Err() != nil {
			return runner.Fail(port.CodeTimeout, runner.DeadlineCause(ctx, run.Spec.Limits.Timeout))
		}
		if s.r.removedUnderUs(ctx, s.id) {
			return runner.Fail(port.CodeInternal, removedBeforeRun("attach", err))
		}
		return runner.Fail(port.CodeInternal, fmt.Errorf("attach: %w", classify(err)))
	}
	run.Defer(func() { att.Close() })
	s.stderr, s.collect = captureOutput(att, run.Spec, run.Result, s.log)
	// Wait is registered before start so a fast exit cannot be missed.
	waitCtx, stopWait := context.WithCancel(context.WithoutCancel(ctx))
	run.Defer(stopWait)
	s.wait = s.r.cfg.api.ContainerWait(waitCtx, s.id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	return nil
}

func (s *oneShot) Start(ctx context.Context, run *runner.Run) error {
	if _, err := s.r.cfg.api.ContainerStart(run.Limit, s.id, client.ContainerStartOptions{}); err != nil {
		s.collect()
		if run.Limit.Err() != nil {
			// The limit passed or the caller gave up while the daemon started it: the
			// run's end, not the container's failure (its removal kills what started).
			return runner.Fail(port.CodeTimeout, runner.DeadlineCause(ctx, run.Spec.Limits.Timeout))
		}
		if s.r.removedUnderUs(ctx, s.id) {
			return runner.Fail(port.CodeInternal, removedBeforeRun("start", err))
		}
		return runner.Fail(port.CodeContainerFailed, fmt.Errorf("start: %w", err))
	}
	s.log.Debug("container started")
	// The sandbox's memory cgroup, sampled while it runs (it goes with the container).
	s.mem = cgroupmem.Start(func() int { return s.r.pid(ctx, s.id) }, memSampleInterval)
	run.Defer(func() {
		run.Result.Memory = cgroupmem.Ended(s.mem.Stop(), run.Result.ErrorCode == port.CodeOOMKilled)
	})
	return nil
}

func (s *oneShot) Wait(ctx, runCtx context.Context, run *runner.Run) error {
	select {
	case w := <-s.wait.Result:
		s.collect()
		run.Result.Duration = time.Since(run.Start)
		run.Result.ExitCode = int(w.StatusCode)
		if w.Error != nil && w.Error.Message != "" {
			return runner.Fail(port.CodeInternal, errors.New(w.Error.Message))
		}
		s.status = w.StatusCode
		return nil
	case err := <-s.wait.Error:
		s.collect()
		return runner.Fail(port.CodeInternal, s.r.waitFailed(ctx, s.id, err, "container"))
	case <-runCtx.Done():
		return runCtx.Err()
	}
}

func (s *oneShot) Stop(ctx context.Context, run *runner.Run) error {
	cause := runner.DeadlineCause(ctx, run.Spec.Limits.Timeout)
	s.mem.Sample()
	cause = cgroupmem.Hint(cause, s.mem.Stop(), time.Since(run.Start))
	s.r.kill(ctx, s.id, s.wait, s.log)
	s.collect()
	return runner.Fail(port.CodeTimeout, cause)
}

func (s *oneShot) Classify(ctx context.Context, run *runner.Run) (port.ErrorCode, error) {
	return s.r.exitResult(ctx, s.id, s.status, run.Result, s.stderr, run.Spec, "container")
}
