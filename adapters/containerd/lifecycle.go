package containerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/agentsandbox/sandbox/internal/ctxsleep"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/capture"
	"github.com/agentsandbox/sandbox/internal/runner/cgroupmem"
	"github.com/agentsandbox/sandbox/port"
)

// oneShot is a one-shot run's containerd steps (runner.Steps): a container and its
// task, started, waited for, and deleted in the background.
type oneShot struct {
	r *Runner

	img       *imageInfo
	log       *slog.Logger
	oom       *oomWitness
	container client.Container
	task      client.Task
	exited    atomic.Bool // its exit was seen: delete it without a kill
	unsure    atomic.Bool // its create was not answered: a task may exist
	stderr    *capture.Buffer
	collect   func(until time.Time)
	statusC   <-chan client.ExitStatus
	status    client.ExitStatus
	mem       *cgroupmem.Sampler
}

var (
	_ runner.Steps  = (*oneShot)(nil)
	_ runner.Traced = (*oneShot)(nil)
)

func (s *oneShot) Engine() string { return "containerd" }

func (s *oneShot) Validate(ctx context.Context, spec port.RunSpec) (port.RunSpec, error) {
	// A runner alone has no pre-booted sandbox: Preload runs cold (its mounts kept).
	spec = spec.WithDefaults().ColdSpec()
	if err := s.r.check(spec); err != nil {
		return spec, err
	}
	return spec, s.r.reachable()
}

func (s *oneShot) Image(ctx context.Context, run *runner.Run) (err error) {
	if s.img, err = s.r.imageInfo(ctx, run.Spec.Image); err != nil {
		// A bad reference fails the container, as on Docker; a missing image is
		// port.ErrImageNotFound with no result: nothing was created.
		if errors.Is(err, port.ErrInvalidSpec) {
			return runner.Fail(port.CodeContainerFailed, err)
		}
		return err
	}
	return nil
}

func (s *oneShot) Create(ctx context.Context, run *runner.Run) error {
	spec, r := run.Spec, s.r
	id := containerID(spec.RunID)
	lbls := runner.ResourceLabels(r.cfg.owner, spec.RunID, port.KindSandbox, spec.Labels, run.Start)
	s.log = r.cfg.logger.With(logattr.RunID, spec.RunID, logattr.Container, id)
	// OOM kills arrive as events; subscribe before the task exists so none is missed.
	s.oom = &oomWitness{seen: make(chan struct{})}
	if !r.cfg.ignoreOOMEvents {
		run.Defer(r.watchOOM(id, s.oom.event))
	}
	r.phase("image")
	lease, container, err := r.createHeld(ctx, id, spec, s.img, lbls)
	if err != nil {
		var le *leaseError
		if errors.Is(err, port.ErrUnavailable) || errors.As(err, &le) {
			return err
		}
		return runner.Fail(port.CodeContainerFailed, err)
	}
	r.phase("container")
	// Registered before anything else can fail. The removal runs after the result is
	// in, in the background (bounded, with a fresh context, so a cancelled caller or a
	// panic cannot leak the task, container or snapshot; all stay labelled for Sweep).
	s.container = container
	run.Defer(func() { r.removeLater(container, spec.RunID, &s.task, &s.exited, &s.unsure, lease) })
	s.log.Debug("container created")
	// The run's limit bounds the task's create and start too: a shim that stops
	// answering (frozen, overloaded) must not hold RunOnce past the limit plus the
	// kill grace, whichever call it is in.
	task, stdout, stderr, err := newTask(run.Limit, container, spec)
	if err != nil {
		if limitPassed(run.Limit, err) {
			// The limit passed (or the caller gave up) before the create was answered:
			// a task may exist, for the removal to find.
			s.unsure.Store(true)
			cause := runner.DeadlineCause(ctx, spec.Limits.Timeout)
			if ctx.Err() == nil {
				cause = fmt.Errorf("%w (the task's create was not confirmed within the limit: its shim did not answer; a task it made is removed in the background, and Sweep removes what is left)", cause)
			}
			return runner.Fail(port.CodeTimeout, cause)
		}
		if r.containerGone(ctx, container) {
			return runner.Fail(port.CodeInternal, removedBeforeRun("create task", err))
		}
		return runner.Fail(port.CodeContainerFailed, err)
	}
	s.task, s.stderr = task, stderr
	r.phase("task")
	s.collect = func(until time.Time) { collectOutput(task, until, run.Result, stdout, stderr, s.log) }
	return nil
}

func (s *oneShot) Attach(ctx context.Context, run *runner.Run) (err error) {
	if s.statusC, err = s.task.Wait(context.WithoutCancel(ctx)); err != nil {
		if s.r.removedUnderUs(ctx, s.container) {
			return runner.Fail(port.CodeInternal, removedBeforeRun("wait", err))
		}
		return runner.Fail(port.CodeInternal, fmt.Errorf("wait: %w", classify(err)))
	}
	return nil
}

func (s *oneShot) Start(ctx context.Context, run *runner.Run) error {
	if err := s.task.Start(run.Limit); err != nil {
		if limitPassed(run.Limit, err) {
			return runner.Fail(port.CodeTimeout, s.r.timedOut(ctx, run.Spec, s.task, s.statusC, &s.exited, nil, time.Since(run.Start), s.collect, s.log))
		}
		if s.r.removedUnderUs(ctx, s.container) {
			return runner.Fail(port.CodeInternal, removedBeforeRun("start", err))
		}
		return runner.Fail(port.CodeContainerFailed, fmt.Errorf("start: %w", classify(err)))
	}
	s.r.phase("start")
	s.log.Debug("task started")
	// The task's memory cgroup, sampled while it runs (the shim keeps it until the
	// task is deleted, so the exit is sampled too).
	s.mem = cgroupmem.Start(func() int { return int(s.task.Pid()) }, memSampleInterval)
	run.Defer(func() { run.Result.Memory = s.mem.Stop() })
	return nil
}

func (s *oneShot) Wait(ctx, runCtx context.Context, run *runner.Run) error {
	select {
	case s.status = <-s.statusC:
		s.exited.Store(true)
		s.mem.Sample()
		s.r.phase("exit")
		s.collect(time.Now().Add(ioGrace))
		s.r.phase("output")
		run.Result.Duration = time.Since(run.Start)
		return nil
	case <-runCtx.Done():
		return runCtx.Err()
	}
}

func (s *oneShot) Stop(ctx context.Context, run *runner.Run) error {
	return runner.Fail(port.CodeTimeout, s.r.timedOut(ctx, run.Spec, s.task, s.statusC, &s.exited, s.mem, time.Since(run.Start), s.collect, s.log))
}

func (s *oneShot) Classify(ctx context.Context, run *runner.Run) (port.ErrorCode, error) {
	return s.r.exitResult(ctx, s.container, s.task, s.status, run.Result, s.stderr, s.oom, run.Spec, s.log)
}

// limitPassed reports whether a call bounded by the run's limit failed because the
// limit passed. containerd answers with its own side of the propagated deadline
// ("context deadline exceeded", as an unknown error), which can arrive a moment before
// the host's context ends too: such an answer waits up to a second for it.
func limitPassed(limit context.Context, err error) bool {
	if limit.Err() != nil {
		return true
	}
	if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
		return false
	}
	return !ctxsleep.Sleep(limit, time.Second)
}
