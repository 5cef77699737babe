package docker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

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
	_ port.LogFollower   = (*dockerSession)(nil)
)

// WithSessionDir sets the directory under which sessions get their host directories
// (exposed sockets, heartbeat). Default: agentsandbox-sessions in the system's
// temporary directory. Sweep and Attach only act on session directories directly under
// it, whatever a label says.
func WithSessionDir(dir string) Option {
	return only(ctorRunner, "WithSessionDir", func(c *config) error { return optcheck.AbsDir(&c.sessionRoot, dir, "session dir") })
}

func (r *Runner) sessionRoot() string { return r.cfg.sessionDir() }

func (c config) sessionDir() string { return session.Root(c.sessionRoot) }

// execAPI is the part of the SDK sessions use besides apiClient.
type execAPI interface {
	ExecCreate(ctx context.Context, containerID string, options client.ExecCreateOptions) (client.ExecCreateResult, error)
	ExecAttach(ctx context.Context, execID string, options client.ExecAttachOptions) (client.ExecAttachResult, error)
	ExecInspect(ctx context.Context, execID string, options client.ExecInspectOptions) (client.ExecInspectResult, error)
}

// Start implements port.SessionRunner. Sessions need the bridge (WithBridge): it
// exposes the ports, ends the session at its lifetime even without a host, and
// bounds execs. Errors are those of RunOnce before the process runs, plus
// port.ErrInvalidSpec without a bridge.
func (r *Runner) Start(ctx context.Context, ss port.SessionSpec) (port.Session, error) {
	var entrypoint []string
	var id string
	return session.Launch(ctx, ss, session.Steps[*dockerSession]{
		Op: "docker.Start", Root: r.sessionRoot(), Owner: r.cfg.owner, Bridge: r.cfg.bridgePath != "", Leased: true,
		Check: func(ctx context.Context, ss *port.SessionSpec) (_ string, err error) {
			if err := r.check(ctx, ss.RunSpec); err != nil {
				return "", err
			}
			if ss.Image, err = r.ensureImage(ctx, ss.Image); err != nil {
				return "", err
			}
			if entrypoint, err = r.entrypoint(ctx, ss.RunSpec); err != nil {
				return "", err
			}
			// The bridge writes the session's output log, which every handle reads.
			entrypoint = session.InsertFlags(entrypoint, session.Flags(*ss, true))
			return containerName(ss.RunID), nil
		},
		Create: func(ctx context.Context, ss port.SessionSpec, st session.Setup) error {
			cfg, hc := sandboxConfig(ss.RunSpec, entrypoint, st.Labels, r.cfg.bridgePath)
			hc.Runtime = r.cfg.runtime
			for _, m := range st.Mounts(true) {
				hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
			}
			// The session's output is its log (session.LogDir); the daemon's copy is for
			// `docker logs` only, bounded like it (two files of the log limit).
			hc.LogConfig = container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": strconv.Itoa(ss.LogLimit), "max-file": "2"}}
			created, err := r.cfg.api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: st.Name, Config: cfg, HostConfig: hc})
			if err != nil {
				if cerr := r.createError(ctx, ss.Image, err); errors.Is(cerr, port.ErrImageNotFound) {
					return cerr
				}
				return &port.RunError{Code: port.CodeContainerFailed, Err: classify(err)}
			}
			id = created.ID
			return nil
		},
		// A fresh context: a cancelled caller must not leak the container.
		Remove: func(ctx context.Context, _ session.Setup) { r.remove(ctx, id, ss.RunID) },
		Start: func(ctx context.Context, ss port.SessionSpec, st session.Setup) (*dockerSession, error) {
			s := r.newSession(st.Meta(id, ss), st.Lease)
			if err := s.watch(ctx, container.WaitConditionNextExit); err != nil {
				s.halt()
				return nil, err
			}
			if _, err := r.cfg.api.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
				s.halt()
				if r.removedUnderUs(ctx, id) {
					return nil, &port.RunError{Code: port.CodeInternal, Err: removedBeforeRun("start", err)}
				}
				return nil, &port.RunError{Code: port.CodeContainerFailed, Err: fmt.Errorf("start: %w", classify(err))}
			}
			return s, nil
		},
		Halt: (*dockerSession).halt,
		Started: func(*dockerSession) {
			r.cfg.logger.Debug("session started", logattr.RunID, ss.RunID, logattr.Container, short(id))
		},
	})
}

// Attach implements port.SessionRunner.
func (r *Runner) Attach(ctx context.Context, id string) (port.Session, error) {
	ins, err := r.cfg.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return nil, opErr("Attach", "", classify(err))
	}
	c := ins.Container
	if c.Config == nil {
		return nil, opErr("Attach", "", fmt.Errorf("%w: container %s has no config", port.ErrNotFound, short(id)))
	}
	m, lease, err := session.Reattach(r.cfg.owner, r.sessionRoot(), c.ID, c.Config.Labels)
	if err != nil {
		return nil, opErr("Attach", m.RunID, err)
	}
	s := r.newSession(m, lease)
	s.InitPause(c.State != nil && c.State.Paused)
	if err := s.watch(ctx, container.WaitConditionNotRunning); err != nil {
		s.halt()
		return nil, opErr("Attach", m.RunID, err)
	}
	_ = s.Heartbeat()
	return s, nil
}

// dockerSession is a Docker session's handle.
type dockerSession struct {
	*session.Handle
	session.Pausable
	r *Runner
}

func (r *Runner) newSession(m session.Meta, lease *runlease.Lease) *dockerSession {
	h := session.NewHandle(m, lease)
	h.OnFinish = telemetry.Or(r.cfg.tel).SessionHeld("docker")
	s := &dockerSession{Handle: h, r: r}
	s.Pausable = session.NewPausable(h, freezer{s}, "docker", r.cfg.killGrace, r.cfg.logger)
	return s
}

// watch waits for the exit, which it records as RunOnce would classify it, and ends the
// session at its lifetime. The output is in the session's log, not in any stream of
// the daemon's this handle would hold.
func (s *dockerSession) watch(ctx context.Context, cond container.WaitCondition) error {
	wctx := s.Watch.Context(context.WithoutCancel(ctx))
	wait := s.r.cfg.api.ContainerWait(wctx, s.ID(), client.ContainerWaitOptions{Condition: cond})
	s.Watch.Go(func() {
		// The lifetime's timer follows the deadline as resumes move it.
		life := s.NewLifetime()
		defer life.Stop()
		for {
			select {
			case <-life.Changed():
				life.Rearm()
			case w := <-wait.Result:
				s.finish(int(w.StatusCode), nil, nil)
				return
			case err := <-wait.Error:
				if wctx.Err() != nil {
					return // detached or stopped
				}
				s.finish(-1, &port.RunError{Code: port.CodeInternal, Err: s.r.waitFailed(wctx, s.ID(), err, "session's sandbox")}, nil)
				return
			case <-life.C():
				life.Disarm()
				// The lifetime is over: end it now (the bridge would, a little later).
				// Docker thaws a paused container after a SIGKILL.
				kctx, kcancel := context.WithTimeout(context.Background(), s.r.cfg.killGrace)
				_, _ = s.r.cfg.api.ContainerKill(kctx, s.ID(), client.ContainerKillOptions{Signal: "SIGKILL"})
				kcancel()
				s.finish(-1, nil, fmt.Errorf("session exceeded its lifetime (%s)", s.CurrentDeadline().Format(time.RFC3339)))
			case <-wctx.Done():
				return
			}
		}
	})
	return nil
}

// finish classifies and records the exit. timedOut, if set, makes it a timeout.
func (s *dockerSession) finish(code int, runErr error, timedOut error) {
	res := &port.RunResult{ExitCode: code}
	stopping := s.Stopping()
	fail := func(c port.ErrorCode, cause error) {
		res.ErrorCode = c
		s.Handle.Finish(res, opErr("Session", s.RunID(), &port.RunError{Code: c, Err: cause}))
	}
	switch {
	case timedOut != nil:
		fail(port.CodeTimeout, timedOut)
		return
	case runErr != nil:
		res.ErrorCode = port.CodeInternal
		s.Handle.Finish(res, opErr("Session", s.RunID(), runErr))
		return
	}
	removed := func() bool { return s.r.removedUnderUs(context.Background(), s.ID()) }
	if c, cause := s.ExitFailure(code, stopping, removed, nil); c != "" {
		fail(c, cause)
		return
	}
	if dl := s.CurrentDeadline(); !stopping && code == 128+15 && time.Now().After(dl) && !dl.IsZero() {
		fail(port.CodeTimeout, errors.New("session exceeded its lifetime"))
		return
	}
	s.Handle.Finish(res, nil)
}

// halt stops watching (used on Start's and Attach's failure paths; Start's
// deferred cleanup removes the container).
func (s *dockerSession) halt() {
	s.Halt(fmt.Errorf("%w: session never started", port.ErrContainerFailed))
}

// Stop implements port.Session: a paused session thawed, SIGTERM, SIGKILL after
// grace, then the container and the session's directory go.
func (s *dockerSession) Stop(ctx context.Context, grace time.Duration) (*port.RunResult, error) {
	api := s.r.cfg.api
	return s.StopWith(ctx, session.Stopper{
		Thaw: s.ThawBeforeStop,
		End: func(ctx context.Context) {
			s.Terminate(ctx, grace, func() {
				if _, err := api.ContainerKill(ctx, s.ID(), client.ContainerKillOptions{Signal: "SIGTERM"}); err != nil && !errors.Is(classify(err), port.ErrNotFound) {
					s.r.cfg.logger.Warn("session: SIGTERM failed", logattr.RunID, s.RunID(), logattr.Err, err)
				}
			}, func(kctx context.Context) {
				_, _ = api.ContainerKill(kctx, s.ID(), client.ContainerKillOptions{Signal: "SIGKILL"})
			}, func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.WithoutCancel(ctx), s.r.cfg.killGrace)
			})
		},
		Remove: func(ctx context.Context) { s.r.remove(context.WithoutCancel(ctx), s.ID(), s.RunID()) },
		Root:   s.r.sessionRoot(),
		Log:    s.r.cfg.logger.With(logattr.RunID, s.RunID()),
	})
}

// Exec implements port.Session. The command runs through the bridge, which ends it at
// its timeout inside the sandbox (Docker has no API to kill an exec).
func (s *dockerSession) Exec(ctx context.Context, es port.ExecSpec) (*port.ExecResult, error) {
	es, err := s.BeginExec(es)
	if err != nil {
		return nil, opErr("Exec", s.RunID(), err)
	}
	ex, ok := s.r.cfg.api.(execAPI)
	if !ok {
		return nil, opErr("Exec", s.RunID(), fmt.Errorf("%w: the Docker client cannot exec", port.ErrUnsupported))
	}
	timeout := s.ExecTimeout(es.Timeout)
	start := time.Now()
	argv := append(bridgeapi.Prefix(bridgeTarget, false, timeout, start), es.Argv...)
	dir := es.Dir
	if dir == "" && s.Workspace != "" {
		dir = port.WorkspacePath
	}
	created, err := ex.ExecCreate(ctx, s.ID(), client.ExecCreateOptions{
		User: s.User, Cmd: argv, Env: port.EnvList(runner.ExecEnv(es.Env)), WorkingDir: dir, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, opErr("Exec", s.RunID(), classify(err))
	}
	att, err := ex.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, opErr("Exec", s.RunID(), classify(err))
	}
	defer att.Close()
	stdout, stderr, ow, ew := session.ExecOutput(es)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = stdcopy.StdCopy(ow, ew, att.Reader)
	}()
	res := &port.ExecResult{ExitCode: -1}
	collect := func() {
		res.Stdout, res.StdoutTruncated = stdout.Result()
		res.Stderr, res.StderrTruncated = stderr.Result()
		res.Duration = time.Since(start)
	}
	// The bridge ends the command at timeout+DeadlineSlack; give it its grace too.
	t := time.NewTimer(timeout + bridgeapi.DeadlineSlack + bridgeapi.DeadlineGrace + time.Second)
	defer t.Stop()
	select {
	case <-copied:
	case <-t.C:
		att.Close()
		<-copied
		collect()
		return res, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeTimeout, Err: fmt.Errorf("exec exceeded its %v limit", timeout)})
	case <-ctx.Done():
		att.Close()
		<-copied
		collect()
		return res, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeTimeout, Err: context.Cause(ctx)})
	}
	collect()
	ins, err := ex.ExecInspect(context.WithoutCancel(ctx), created.ID, client.ExecInspectOptions{})
	if err != nil {
		return res, opErr("Exec", s.RunID(), classify(err))
	}
	res.ExitCode = ins.ExitCode
	if reason, ok := runner.ExecFailed(true, res.ExitCode, stderr.Tail()); ok {
		return res, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeContainerFailed, Err: errors.New(reason)})
	}
	if tail := stderr.Tail(); (res.ExitCode == 143 || res.ExitCode == 137) && strings.Contains(string(tail), bridgeapi.ErrDeadline.Error()) {
		return res, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeTimeout, Err: fmt.Errorf("exec exceeded its %v limit", timeout)})
	}
	return res, nil
}
