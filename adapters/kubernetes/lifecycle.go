package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// oneShot is a one-shot run's Kubernetes steps (runner.Steps): a Pod created from the
// run's spec (the kubelet pulls and starts it), its agent's log followed once it
// runs, its end awaited, and the Pod deleted.
type oneShot struct {
	r *Runner

	ps         podSpec
	log        *slog.Logger
	out        *output
	created    *corev1.Pod
	final      *corev1.Pod
	follow     sync.WaitGroup
	followCtx  context.Context
	stopFollow context.CancelFunc
	following  bool
	ended      bool

	tCreated, tInit, tRunning, tEnded time.Time
}

var _ runner.Steps = (*oneShot)(nil)

func (s *oneShot) Validate(ctx context.Context, spec port.RunSpec) (port.RunSpec, error) {
	spec = spec.WithDefaults()
	if err := s.r.check(spec); err != nil {
		return spec, err
	}
	return spec, ctx.Err()
}

// Image does nothing: the kubelet pulls the image by the Pod's pull policy.
func (s *oneShot) Image(context.Context, *runner.Run) error { return nil }

func (s *oneShot) Create(ctx context.Context, run *runner.Run) error {
	r, spec := s.r, run.Spec
	s.ps = podSpec{name: podName(spec.RunID), created: run.Start}
	pod := r.buildPod(spec, s.ps)
	s.log = r.cfg.logger.With(logattr.RunID, spec.RunID, "pod", s.ps.name)
	// Cleanup is registered before the Pod exists and runs with a fresh context, so a
	// cancelled caller (or a panic) cannot leak it.
	run.Defer(func() {
		if s.created != nil {
			r.cleanup(context.WithoutCancel(ctx), s.ps.name, s.ended, s.log)
		}
	})
	s.out = newOutput(spec.OutputLimit, spec.Stdout, spec.Stderr)
	run.Defer(s.follow.Wait)
	s.followCtx, s.stopFollow = context.WithCancel(context.WithoutCancel(ctx))
	run.Defer(s.stopFollow)
	created, err := r.cli.CoreV1().Pods(r.cfg.namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		err = classify(err)
		if errors.Is(err, port.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		return runner.Fail(port.CodeContainerFailed, fmt.Errorf("creating the pod: %w", err))
	}
	s.created = created
	return nil
}

// Attach does nothing yet: the agent's log is followed once it runs (Wait).
func (s *oneShot) Attach(context.Context, *runner.Run) error { return nil }

// Start does nothing: the kubelet starts the Pod it was given.
func (s *oneShot) Start(context.Context, *runner.Run) error { return nil }

// startFollow follows the agent's log, once.
func (s *oneShot) startFollow() {
	if s.following {
		return
	}
	s.following = true
	s.follow.Add(1)
	go func() {
		defer s.follow.Done()
		s.r.follow(s.followCtx, s.ps.name, s.out, s.log)
	}()
}

func (s *oneShot) Wait(ctx, runCtx context.Context, run *runner.Run) error {
	s.tCreated = time.Now()
	final, waitErr := s.r.wait(runCtx, s.created, done, func(p *corev1.Pod) {
		if s.tInit.IsZero() && len(p.Status.InitContainerStatuses) > 0 && p.Status.InitContainerStatuses[0].State.Terminated != nil {
			s.tInit = time.Now()
		}
		if st := agentState(p); st != nil && (st.Running != nil || st.Terminated != nil) {
			if s.tRunning.IsZero() {
				s.tRunning = time.Now()
			}
			s.startFollow()
		}
	})
	s.tEnded = time.Now()
	run.Defer(func() {
		s.log.Debug("run phases", "create", s.tCreated.Sub(run.Start), "init-done", since(s.tInit, s.tCreated), "running", since(s.tRunning, s.tCreated),
			"ended", s.tEnded.Sub(s.tCreated), "collected", time.Since(s.tEnded))
	})
	if waitErr != nil && runCtx.Err() != nil {
		return waitErr // the time limit or the caller ended the run: Stop
	}
	// Nothing of the Pod runs any more (the agent ended, or never started), unless it
	// was lost: then its deletion is already under way and is waited for.
	s.ended = waitErr == nil || !errors.Is(waitErr, ErrPodLost)
	s.r.drain(s.followCtx, &s.follow, s.stopFollow, s.following, s.ps.name, s.out)
	s.r.fill(run.Result, s.out)
	if waitErr != nil {
		return runner.Fail(waitCode(waitErr), waitErr)
	}
	s.final = final
	run.Result.Duration = time.Since(run.Start)
	return nil
}

// Stop deletes the Pod where it is, keeping what the agent wrote so far (the
// follower has it; the deletion ends its stream).
func (s *oneShot) Stop(ctx context.Context, run *runner.Run) error {
	s.r.kill(context.WithoutCancel(ctx), s.ps.name, s.log)
	s.r.drain(s.followCtx, &s.follow, s.stopFollow, s.following, s.ps.name, s.out)
	s.r.fill(run.Result, s.out)
	return runner.Fail(port.CodeTimeout, runner.DeadlineCause(ctx, run.Spec.Limits.Timeout))
}

func (s *oneShot) Classify(ctx context.Context, run *runner.Run) (port.ErrorCode, error) {
	return s.r.outcome(s.final, run.Result)
}
