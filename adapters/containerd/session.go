package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
)

var (
	_ port.SessionRunner = (*Runner)(nil)
	_ port.LogFollower   = (*ctrSession)(nil)
)

// WithSessionDir sets the directory under which sessions get their host directories
// (exposed sockets, output log, heartbeat). Default: agentsandbox-sessions in the
// system's temporary directory. Sweep and Attach only act on session directories
// directly under it, whatever a label says.
func WithSessionDir(dir string) Option {
	return func(c *config) error { return optcheck.AbsDir(&c.sessionRoot, dir, "session dir") }
}

func (r *Runner) sessionRoot() string { return session.Root(r.cfg.sessionRoot) }

// Start implements port.SessionRunner. Sessions need the bridge (WithBridge): it
// exposes the ports and ends the session at its lifetime even without a host. Errors
// are those of RunOnce before the process runs, plus port.ErrInvalidSpec without a
// bridge.
func (r *Runner) Start(ctx context.Context, ss port.SessionSpec) (port.Session, error) {
	var img *imageInfo
	var c client.Container
	return session.Launch(r.ns(ctx), ss, session.Steps[*ctrSession]{
		Op: "containerd.Start", Root: r.sessionRoot(), Owner: r.cfg.owner, Bridge: r.cfg.bridgePath != "", Leased: true,
		Check: func(ctx context.Context, ss *port.SessionSpec) (_ string, err error) {
			if err := r.check(ss.RunSpec); err != nil {
				return "", err
			}
			if err := r.reachable(); err != nil {
				return "", err
			}
			if img, err = r.imageInfo(ctx, ss.Image); err != nil {
				if errors.Is(err, port.ErrNotFound) && !errors.Is(err, port.ErrImageNotFound) {
					return "", &port.RunError{Code: port.CodeContainerFailed, Err: err}
				}
				return "", err
			}
			return containerID(ss.RunID), nil
		},
		Create: func(ctx context.Context, ss port.SessionSpec, st session.Setup) (err error) {
			if c, err = r.create(ctx, st.Name, ss.RunSpec, img, st.Labels, withSession(st, ss)); err != nil {
				if errors.Is(err, port.ErrUnavailable) {
					return err
				}
				return &port.RunError{Code: port.CodeContainerFailed, Err: err}
			}
			return nil
		},
		Remove: func(context.Context, session.Setup) { r.remove(c, ss.RunID, false) },
		Start: func(ctx context.Context, ss port.SessionSpec, st session.Setup) (*ctrSession, error) {
			s := r.newSession(st.Meta(st.Name, ss), c, st.Lease)
			// No stdio for the host: the session's output is its log, which the bridge
			// writes and every handle reads (a FIFO has one reader: it would take the
			// output from whoever else reads it). The shim gives the task /dev/null.
			task, err := c.NewTask(ctx, cio.NullIO)
			if err != nil {
				s.halt()
				if r.containerGone(ctx, c) {
					return nil, &port.RunError{Code: port.CodeInternal, Err: removedBeforeRun("create task", err)}
				}
				return nil, &port.RunError{Code: port.CodeContainerFailed, Err: fmt.Errorf("create task: %w", classify(err))}
			}
			if err := s.watch(ctx, task); err != nil {
				s.halt()
				return nil, err
			}
			if err := task.Start(ctx); err != nil {
				s.halt()
				if r.removedUnderUs(ctx, c) {
					return nil, &port.RunError{Code: port.CodeInternal, Err: removedBeforeRun("start", err)}
				}
				return nil, &port.RunError{Code: port.CodeContainerFailed, Err: fmt.Errorf("start: %w", classify(err))}
			}
			close(s.started)
			return s, nil
		},
		Halt: (*ctrSession).halt,
		Started: func(s *ctrSession) {
			r.cfg.logger.Debug("session started", logattr.RunID, ss.RunID, logattr.Container, s.ID())
		},
	})
}

// withSession mounts the parts of the session's directory (session.Setup.Mounts)
// and has the bridge expose the ports and write the agent's output to the log,
// relaying it so that the agent never blocks on it. It runs after the lockdown
// options, which put the bridge first.
func withSession(st session.Setup, ss port.SessionSpec) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		for _, m := range st.Mounts(true) {
			opts := []string{"rbind", "rw", "nosuid", "nodev", "noexec"}
			if m.ReadOnly {
				opts[1] = "ro"
			}
			s.Mounts = append(s.Mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: opts})
		}
		s.Process.Args = session.InsertFlags(s.Process.Args, session.Flags(ss, true))
		return nil
	}
}

// Attach implements port.SessionRunner.
func (r *Runner) Attach(ctx context.Context, id string) (port.Session, error) {
	if err := port.ValidateRunID(id); err != nil {
		return nil, opErr("Attach", "", fmt.Errorf("%w: %q is not a session id", port.ErrNotFound, id))
	}
	if err := r.reachable(); err != nil {
		return nil, opErr("Attach", "", err)
	}
	ctx = r.ns(ctx)
	c, err := r.cli.LoadContainer(ctx, id)
	if err != nil {
		return nil, opErr("Attach", "", classify(err))
	}
	lbls, err := c.Labels(ctx)
	if err != nil {
		return nil, opErr("Attach", "", classify(err))
	}
	m, lease, err := session.Reattach(r.cfg.owner, r.sessionRoot(), id, lbls)
	if err != nil {
		return nil, opErr("Attach", m.RunID, err)
	}
	s := r.newSession(m, c, lease)
	task, err := c.Task(ctx, nil) // the output is in the session's log
	if err != nil {
		s.halt()
		return nil, opErr("Attach", m.RunID, classify(err))
	}
	s.InitPause(taskPaused(ctx, task))
	close(s.started)
	if err := s.watch(ctx, task); err != nil {
		s.halt()
		return nil, opErr("Attach", m.RunID, err)
	}
	_ = s.Heartbeat()
	return s, nil
}

// ctrSession is a containerd session's handle.
type ctrSession struct {
	*session.Handle
	session.Pausable
	r *Runner
	c client.Container

	mu      sync.Mutex
	task    client.Task
	started chan struct{} // closed once the task runs
}

func (r *Runner) newSession(m session.Meta, c client.Container, lease *runlease.Lease) *ctrSession {
	h := session.NewHandle(m, lease)
	h.OnFinish = telemetry.Or(r.cfg.tel).SessionHeld("containerd")
	s := &ctrSession{Handle: h, r: r, c: c, started: make(chan struct{})}
	s.Pausable = session.NewPausable(h, freezer{s}, "containerd", r.cfg.cleanupTimeout, r.cfg.logger)
	return s
}

// watch waits for the task's exit and records it as RunOnce classifies it.
func (s *ctrSession) watch(ctx context.Context, task client.Task) error {
	wctx := s.Watch.Context(s.r.ns(context.WithoutCancel(ctx)))
	statusC, err := task.Wait(wctx)
	if err != nil {
		s.Watch.Halt()
		if s.r.removedUnderUs(ctx, s.c) {
			return &port.RunError{Code: port.CodeInternal, Err: removedBeforeRun("wait", err)}
		}
		return &port.RunError{Code: port.CodeInternal, Err: fmt.Errorf("wait: %w", classify(err))}
	}
	s.mu.Lock()
	s.task = task
	s.mu.Unlock()
	s.Watch.Go(func() {
		// The lifetime's timer follows the deadline as resumes move it; it runs once
		// the task does.
		var life *session.Lifetime
		var lifeC <-chan time.Time
		var lifeChanged <-chan struct{}
		defer func() {
			if life != nil {
				life.Stop()
			}
		}()
		started := s.started
		var timedOut error
		for {
			if life != nil {
				lifeC, lifeChanged = life.C(), life.Changed()
			}
			select {
			case <-started:
				started = nil
				life = s.NewLifetime()
			case <-lifeChanged:
				life.Rearm()
			case st := <-statusC:
				if wctx.Err() != nil && st.Error() != nil {
					return
				}
				s.finish(task, st, timedOut)
				return
			case <-lifeC:
				life.Disarm()
				timedOut = fmt.Errorf("session exceeded its lifetime (%s)", s.CurrentDeadline().Format(time.RFC3339))
				kctx, kcancel := s.r.cleanupCtx(wctx)
				if err := task.Kill(kctx, syscall.SIGKILL, client.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
					s.r.cfg.logger.Warn("session: kill at the end of its lifetime failed", logattr.RunID, s.RunID(), logattr.Err, err)
				}
				kcancel()
			case <-wctx.Done():
				return
			}
		}
	})
	return nil
}

func (s *ctrSession) finish(task client.Task, st client.ExitStatus, timedOut error) {
	stopping := s.Stopping()
	code, exited, err := st.Result()
	res := &port.RunResult{ExitCode: int(code)}
	fail := func(c port.ErrorCode, cause error) {
		res.ErrorCode = c
		s.Handle.FinishAt(res, opErr("Session", s.RunID(), &port.RunError{Code: c, Err: cause}), exited)
	}
	if err != nil {
		fail(port.CodeInternal, fmt.Errorf("exit status: %w", err))
		return
	}
	if timedOut != nil {
		fail(port.CodeTimeout, timedOut)
		return
	}
	removed := func() bool { return s.r.removedUnderUs(context.Background(), s.c) }
	oomKilled := func() bool {
		ctx, cancel := s.r.cleanupCtx(context.Background())
		defer cancel()
		n, err := oomKills(ctx, task)
		return err == nil && n > 0
	}
	if c, cause := s.ExitFailure(res.ExitCode, stopping, removed, oomKilled); c != "" {
		fail(c, cause)
		return
	}
	s.Handle.FinishAt(res, nil, exited)
}

// halt stops watching (Start's and Attach's failure paths).
func (s *ctrSession) halt() {
	s.Halt(fmt.Errorf("%w: session not started or attached", port.ErrContainerFailed))
}

// Stop implements port.Session: a paused session thawed, SIGTERM, SIGKILL after
// grace, then the task, the container and the session's directory go.
func (s *ctrSession) Stop(ctx context.Context, grace time.Duration) (*port.RunResult, error) {
	s.mu.Lock()
	task := s.task
	s.mu.Unlock()
	return s.StopWith(ctx, session.Stopper{
		Thaw: s.ThawBeforeStop,
		End: func(ctx context.Context) {
			if task == nil {
				return
			}
			ctx = s.r.ns(ctx)
			s.Terminate(ctx, grace, func() {
				if err := task.Kill(ctx, syscall.SIGTERM); err != nil && !errdefs.IsNotFound(err) {
					s.r.cfg.logger.Warn("session: SIGTERM failed", logattr.RunID, s.RunID(), logattr.Err, err)
				}
			}, func(kctx context.Context) {
				_ = task.Kill(kctx, syscall.SIGKILL, client.WithKillAll)
			}, func() (context.Context, context.CancelFunc) { return s.r.cleanupCtx(ctx) })
		},
		Remove: func(context.Context) {
			gone := false
			if task != nil {
				gone = s.r.deleteTask(task, s.RunID(), taskUnknown)
			}
			s.r.remove(s.c, s.RunID(), gone)
		},
		Root: s.r.sessionRoot(),
		Log:  s.r.cfg.logger.With(logattr.RunID, s.RunID()),
	})
}

// Exec implements port.Session: a process in the task with the sandbox's own process
// spec (user, capabilities, no-new-privileges, rlimits), behind the bridge so its time
// limit holds inside too.
func (s *ctrSession) Exec(ctx context.Context, es port.ExecSpec) (*port.ExecResult, error) {
	es, err := s.BeginExec(es)
	if err != nil {
		return nil, opErr("Exec", s.RunID(), err)
	}
	s.mu.Lock()
	task := s.task
	s.mu.Unlock()
	ctx = s.r.ns(ctx)
	spec, err := s.c.Spec(ctx)
	if err != nil {
		return nil, opErr("Exec", s.RunID(), classify(err))
	}
	timeout := s.ExecTimeout(es.Timeout)
	start := time.Now()
	p := *spec.Process
	p.Terminal = false
	p.Args = append(bridgeapi.Prefix(bridgeTarget, false, timeout, start), es.Argv...)
	p.Env = mergeEnv(spec.Process.Env, runner.ExecEnv(es.Env))
	if es.Dir != "" {
		p.Cwd = es.Dir
	}
	stdout, stderr, ow, ew := session.ExecOutput(es)
	var b [6]byte
	_, _ = rand.Read(b[:])
	proc, err := task.Exec(ctx, "exec-"+hex.EncodeToString(b[:]), &p, cio.NewCreator(cio.WithStreams(nil, ow, ew)))
	if err != nil {
		return nil, opErr("Exec", s.RunID(), classify(err))
	}
	defer func() {
		dctx, cancel := s.r.cleanupCtx(ctx)
		defer cancel()
		if _, err := proc.Delete(dctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			s.r.cfg.logger.Warn("session: deleting an exec failed", logattr.RunID, s.RunID(), logattr.Err, err)
		}
	}()
	statusC, err := proc.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return nil, opErr("Exec", s.RunID(), classify(err))
	}
	if err := proc.Start(ctx); err != nil {
		return nil, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeContainerFailed, Err: classify(err)})
	}
	res := &port.ExecResult{ExitCode: -1}
	collect := func() {
		if io := proc.IO(); io != nil {
			done := make(chan struct{})
			go func() { io.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
			}
		}
		res.Stdout, res.StdoutTruncated = stdout.Result()
		res.Stderr, res.StderrTruncated = stderr.Result()
		res.Duration = time.Since(start)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	var cause error
	select {
	case st := <-statusC:
		collect()
		code, _, err := st.Result()
		if err != nil {
			return res, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeInternal, Err: err})
		}
		res.ExitCode = int(code)
		if reason, ok := runner.ExecFailed(true, res.ExitCode, stderr.Tail()); ok {
			return res, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeContainerFailed, Err: errors.New(reason)})
		}
		return res, nil
	case <-t.C:
		cause = fmt.Errorf("exec exceeded its %v limit", timeout)
	case <-ctx.Done():
		cause = context.Cause(ctx)
	}
	s.stopExec(ctx, proc, statusC)
	collect()
	return res, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeTimeout, Err: cause})
}

// stopExec ends an exec past its time: TERM first (the exec's bridge passes it on
// to its child, which would outlive a KILLed bridge, re-parented to the session's
// init), KILL after the bridge's grace; bounded by the cleanup timeout.
func (s *ctrSession) stopExec(ctx context.Context, proc client.Process, statusC <-chan client.ExitStatus) {
	kctx, cancel := s.r.cleanupCtx(ctx)
	defer cancel()
	_ = proc.Kill(kctx, syscall.SIGTERM)
	select {
	case <-statusC:
	case <-time.After(bridgeapi.DeadlineGrace):
		_ = proc.Kill(kctx, syscall.SIGKILL)
		select {
		case <-statusC:
		case <-kctx.Done():
		}
	}
}

// mergeEnv returns base with extra's keys set (replacing base's), extra sorted.
func mergeEnv(base []string, extra map[string]string) []string {
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[k]; !ok {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+extra[k])
	}
	return out
}
