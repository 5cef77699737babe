package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/port"
)

var (
	_ port.SessionRunner = (*Runner)(nil)
	_ port.LogFollower   = (*kubeSession)(nil)
)

// WithSessionDir sets the directory under which sessions get their host directories
// (exposed sockets, heartbeat), mounted into the session's Pod as a hostPath: it must
// be on the node, so this needs host paths (a node-local runner, as the proxy daemon).
// Default: agentsandbox-sessions in the system's temporary directory. Sweep and
// Attach only act on session directories directly under it, whatever a Pod says.
// Keep it short: a socket path is at most 107 bytes.
func WithSessionDir(dir string) Option {
	return func(c *config) error { return optcheck.AbsDir(&c.sessionRoot, dir, "session dir") }
}

func (r *Runner) sessionRoot() string { return session.Root(r.cfg.sessionRoot) }

// Start implements port.SessionRunner: one long-running Pod (the init and the bridge
// in front of the agent, as for a run), whose log the handle follows; Exec goes
// through the API server's pods/exec subresource. Sessions need the bridge
// (WithBridge), host paths (the session directory is a hostPath) and a REST
// configuration (WithConfig: exec streams are not part of a clientset). Errors are
// those of RunOnce before the agent runs, plus port.ErrInvalidSpec without a bridge
// and port.ErrUnsupported without host paths or a REST configuration.
func (r *Runner) Start(ctx context.Context, ss port.SessionSpec) (port.Session, error) {
	var createdPod *corev1.Pod
	return session.Launch(ctx, ss, session.Steps[*kubeSession]{
		Op: "kubernetes.Start", Root: r.sessionRoot(), Owner: r.cfg.owner, Bridge: r.cfg.bridgePath != "",
		Check: func(ctx context.Context, ss *port.SessionSpec) (string, error) {
			if err := r.sessionsPossible(); err != nil {
				return "", err
			}
			if err := r.check(ss.RunSpec); err != nil {
				return "", err
			}
			return podName(ss.RunID), ctx.Err()
		},
		Create: func(ctx context.Context, ss port.SessionSpec, st session.Setup) (err error) {
			pod := r.buildSessionPod(ss, podSpec{name: st.Name, created: st.Start}, st)
			if createdPod, err = r.cli.CoreV1().Pods(r.cfg.namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				err = classify(err)
				if errors.Is(err, port.ErrUnavailable) || ctx.Err() != nil {
					return err
				}
				return &port.RunError{Code: port.CodeContainerFailed, Err: fmt.Errorf("creating the pod: %w", err)}
			}
			return nil
		},
		Remove: func(ctx context.Context, st session.Setup) { r.cleanup(ctx, st.Name, false, r.cfg.logger) },
		Start: func(ctx context.Context, ss port.SessionSpec, st session.Setup) (*kubeSession, error) {
			s := r.newSession(st.Meta(st.Name, ss), execPrefix(createdPod))
			s.watch(createdPod)
			if err := s.waitStarted(ctx); err != nil {
				s.halt()
				return nil, err
			}
			return s, nil
		},
		Halt: (*kubeSession).halt,
		Started: func(s *kubeSession) {
			r.cfg.logger.Debug("session started", logattr.RunID, ss.RunID, "pod", s.ID())
		},
	})
}

// sessionsPossible says why this runner cannot hold sessions, if it cannot.
func (r *Runner) sessionsPossible() error {
	if !r.cfg.hostPaths {
		return fmt.Errorf("%w: kubernetes: sessions with WithHostPaths(false) (the session directory is a hostPath)", port.ErrUnsupported)
	}
	if r.cfg.restConfig == nil {
		return fmt.Errorf("%w: kubernetes: sessions need WithConfig (exec streams are not part of a clientset)", port.ErrUnsupported)
	}
	return nil
}

// buildSessionPod is a run's Pod, marked as a session, with the session's directory's
// parts mounted for the bridge's exposed sockets and its output log (which every
// handle reads), and an init that forwards all output to the node's log (which never
// blocks the agent).
func (r *Runner) buildSessionPod(ss port.SessionSpec, ps podSpec, st session.Setup) *corev1.Pod {
	pod := r.buildPod(ss.RunSpec, ps)
	pod.Labels[port.LabelKind] = port.KindSession
	// Paths and times are no label values: the session's record is in annotations.
	for k, v := range session.Labels(ss, st.Dir, st.Deadline) {
		pod.Annotations[k] = v
	}
	c := &pod.Spec.Containers[0]
	cmd := slices.Clone(c.Command)
	if i := slices.Index(cmd, "-max"); i >= 0 && i+1 < len(cmd) {
		cmd[i+1] = strconv.Itoa(math.MaxInt)
	}
	if i := slices.Index(cmd, "--"); i >= 0 {
		cmd = append(cmd[:i+1:i+1], session.InsertFlags(cmd[i+1:], session.Flags(ss, false))...)
	}
	c.Command = cmd
	for _, m := range st.Mounts(false) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, hostPathVolume("session-"+m.Name, m.Source, corev1.HostPathDirectory))
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "session-" + m.Name, MountPath: m.Target})
	}
	return pod
}

// execPrefix is the init's part of the agent container's command ("init run -keep ...
// --"), which an exec repeats so it gets the same environment filter and limits; nil
// when the command is not the runner's.
func execPrefix(p *corev1.Pod) []string {
	for _, c := range p.Spec.Containers {
		if c.Name != agentName {
			continue
		}
		i := slices.Index(c.Command, "--")
		if len(c.Command) < 2 || c.Command[0] != initTarget || c.Command[1] != "run" || i < 0 {
			return nil
		}
		return slices.Clone(c.Command[:i])
	}
	return nil
}

// Attach implements port.SessionRunner: it finds the session's Pod by its labels
// (this runner's owner, kind session) and reads the session's log from its directory.
func (r *Runner) Attach(ctx context.Context, id string) (port.Session, error) {
	if err := port.ValidateRunID(id); err != nil {
		return nil, opErr("Attach", "", fmt.Errorf("%w: %q is not a session id", port.ErrNotFound, id))
	}
	if err := r.sessionsPossible(); err != nil {
		return nil, opErr("Attach", "", err)
	}
	sel := labels.Set{port.LabelOwner: r.cfg.owner, port.LabelKind: port.KindSession}
	list, err := r.cli.CoreV1().Pods(r.cfg.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, opErr("Attach", "", classify(err))
	}
	var pod *corev1.Pod
	for i := range list.Items {
		if list.Items[i].Name == id {
			pod = &list.Items[i]
		}
	}
	if pod == nil || pod.DeletionTimestamp != nil {
		return nil, opErr("Attach", "", fmt.Errorf("%w: no session %s of owner %q", port.ErrNotFound, id, r.cfg.owner))
	}
	m, err := session.ParseLabels(r.cfg.owner, r.sessionRoot(), podRecord(pod))
	if err != nil {
		return nil, opErr("Attach", "", err)
	}
	m.ID = id
	prefix := execPrefix(pod)
	if prefix == nil {
		return nil, opErr("Attach", m.RunID, fmt.Errorf("%w: pod %s was not made by this runner", port.ErrNotFound, id))
	}
	s := r.newSession(m, prefix)
	s.watch(pod)
	_ = s.Heartbeat()
	return s, nil
}

// podRecord is a session Pod's labels and annotations as package session reads them.
func podRecord(p *corev1.Pod) map[string]string {
	m := map[string]string{}
	for k, v := range p.Annotations {
		m[k] = v
	}
	for k, v := range p.Labels {
		m[k] = v
	}
	m[port.LabelRunID] = p.Annotations[annotationRun]
	return m
}

// kubeSession is a Kubernetes session's handle.
type kubeSession struct {
	*session.Handle
	r      *Runner
	prefix []string // the init's command up to "--"

	ctx     context.Context // the watchers': ends on Stop, Detach or a failed start
	started chan struct{}   // closed once the agent runs (or ran)
	startMu sync.Once

	mu       sync.Mutex
	timedOut bool
}

func (r *Runner) newSession(m session.Meta, prefix []string) *kubeSession {
	h := session.NewHandle(m, nil)
	return &kubeSession{Handle: h, r: r, prefix: prefix, ctx: h.Watch.Context(context.Background()),
		started: make(chan struct{})}
}

func (s *kubeSession) markStarted() { s.startMu.Do(func() { close(s.started) }) }

// waitStarted waits until the agent container runs (or has run), or the Pod failed.
func (s *kubeSession) waitStarted(ctx context.Context) error {
	select {
	case <-s.started:
		return nil
	case <-s.Done():
		_, err := s.Result()
		if err == nil {
			return nil
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isDone is done for a session: a Pod being deleted is not lost while the host stops it.
func (s *kubeSession) isDone(p *corev1.Pod) (bool, error) {
	ok, err := done(p)
	var lost *PodLostError
	if ok && errors.As(err, &lost) && lost.Reason == "deleted" {
		s.mu.Lock()
		ours := s.Stopping() || s.timedOut
		s.mu.Unlock()
		if ours {
			return false, nil
		}
	}
	return ok, err
}

// watch starts the goroutines that follow the Pod's status and end the session at its
// lifetime.
func (s *kubeSession) watch(p *corev1.Pod) {
	log := s.r.cfg.logger.With(logattr.RunID, s.RunID(), "pod", s.ID())
	s.Watch.Go(func() {
		var last *corev1.Pod
		final, err := s.r.wait(s.ctx, p, s.isDone, func(p *corev1.Pod) {
			last = p
			if st := agentState(p); st != nil && (st.Running != nil || st.Terminated != nil) {
				s.markStarted()
			}
		})
		if s.ctx.Err() != nil {
			return
		}
		if final == nil {
			final = last
		}
		s.finish(final, err, log)
	})
	if !s.Deadline.IsZero() {
		s.Watch.Go(func() {
			t := time.NewTimer(time.Until(s.Deadline))
			defer t.Stop()
			select {
			case <-t.C:
			case <-s.ctx.Done():
				return
			case <-s.Done():
				return
			}
			s.mu.Lock()
			s.timedOut = true
			s.mu.Unlock()
			s.r.kill(s.ctx, s.ID(), log)
		})
	}
}

// finish records the session's end from its last Pod status.
func (s *kubeSession) finish(p *corev1.Pod, waitErr error, log interface{ Debug(string, ...any) }) {
	s.mu.Lock()
	stopping, timedOut := s.Stopping(), s.timedOut
	s.mu.Unlock()
	res := &port.RunResult{ExitCode: -1}
	var st *corev1.ContainerState
	if p != nil {
		st = agentState(p)
	}
	if st != nil && st.Terminated != nil {
		res.ExitCode = int(st.Terminated.ExitCode)
	}
	fail := func(c port.ErrorCode, cause error) {
		res.ErrorCode = c
		s.Handle.Finish(res, opErr("Session", s.RunID(), &port.RunError{Code: c, Err: cause}))
	}
	tail := s.StderrTail(4096)
	var lost *PodLostError
	var cf *containerFailure
	switch {
	case timedOut:
		fail(port.CodeTimeout, fmt.Errorf("session exceeded its lifetime (%s)", s.Deadline.Format(time.RFC3339)))
	case errors.As(waitErr, &lost) && !stopping:
		fail(port.CodeInternal, waitErr)
	case errors.As(waitErr, &cf):
		fail(port.CodeContainerFailed, waitErr)
	case st != nil && st.Terminated != nil && st.Terminated.Reason == "OOMKilled" || bytes.HasSuffix(tail, []byte(bridgeapi.OOMNotice)):
		fail(port.CodeOOMKilled, errors.New("the agent exceeded its memory limit"))
	case !stopping && (res.ExitCode == bridgeapi.ExitNotFound || res.ExitCode == bridgeapi.ExitCannotExec):
		if why, ok := bridgeapi.ExecFailure(tail); ok {
			fail(port.CodeContainerFailed, errors.New(why))
			return
		}
		s.Handle.Finish(res, nil)
	default:
		s.Handle.Finish(res, nil)
	}
	log.Debug("session ended", "exit", res.ExitCode)
}

// halt stops watching (Start's failure path); the caller removes the Pod.
func (s *kubeSession) halt() {
	s.Halt(fmt.Errorf("%w: session not started", port.ErrContainerFailed))
}

// Stop implements port.Session: the Pod is deleted with grace as its termination
// period, so the kubelet sends SIGTERM (the init passes it to the agent) and SIGKILL
// after grace; the handle waits for the agent's exit status, then for the Pod to go,
// and removes the session's directory.
func (s *kubeSession) Stop(ctx context.Context, grace time.Duration) (*port.RunResult, error) {
	log := s.r.cfg.logger.With(logattr.RunID, s.RunID(), "pod", s.ID())
	return s.StopWith(ctx, session.Stopper{
		End: func(ctx context.Context) {
			secs := int64(math.Ceil(grace.Seconds()))
			err := s.r.cli.CoreV1().Pods(s.r.cfg.namespace).Delete(ctx, s.ID(), metav1.DeleteOptions{GracePeriodSeconds: &secs})
			if err != nil && !apierrors.IsNotFound(err) {
				log.Warn("session: deleting the pod failed", logattr.Err, err)
			}
			// The kubelet kills after the grace; its report can take a few seconds more.
			t := time.NewTimer(grace + 20*time.Second)
			select {
			case <-s.Done():
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		},
		Remove: func(ctx context.Context) { s.r.cleanup(context.WithoutCancel(ctx), s.ID(), true, log) },
		Root:   s.r.sessionRoot(),
		Log:    log,
	})
}

// Exec implements port.Session: the API server's pods/exec runs the init (the same
// environment filter and limits as the agent, the spec's variables added) and the
// bridge (the exec's time limit holds inside too) in the agent container, as its
// user with its security context. Output comes back framed on the exec's stdout.
func (s *kubeSession) Exec(ctx context.Context, es port.ExecSpec) (*port.ExecResult, error) {
	es, err := s.BeginExec(es) // never paused: Kubernetes sessions do not pause
	if err != nil {
		return nil, opErr("Exec", s.RunID(), err)
	}
	timeout := s.ExecTimeout(es.Timeout)
	start := time.Now()
	cmd := slices.Clone(s.prefix)
	if i := slices.Index(cmd, "-max"); i >= 0 && i+1 < len(cmd) {
		cmd[i+1] = strconv.Itoa(es.OutputLimit)
	}
	// The exec's command never holds the attestation key the session's bridge
	// started with (the exec inherits the container's environment).
	env := runner.ExecEnv(es.Env)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd = append(cmd, "-env", k+"="+env[k])
	}
	if es.Dir != "" {
		cmd = append(cmd, "-dir", es.Dir)
	}
	cmd = append(cmd, "-pid", "--")
	cmd = append(cmd, bridgeapi.Prefix(bridgeTarget, false, timeout, start)...)
	cmd = append(cmd, es.Argv...)

	req := s.r.cli.CoreV1().RESTClient().Post().Namespace(s.r.cfg.namespace).Resource("pods").Name(s.ID()).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: agentName, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := s.executor(req.URL())
	if err != nil {
		return nil, opErr("Exec", s.RunID(), fmt.Errorf("%w: %w", port.ErrInternal, err))
	}
	out := newOutput(es.OutputLimit, es.Stdout, es.Stderr)
	pr, pw := io.Pipe()
	decoded := make(chan struct{})
	go func() {
		defer close(decoded)
		_ = out.read(pr)
		_, _ = io.Copy(io.Discard, pr)
	}()
	var initErr limitedBuffer
	pid := &pidSniffer{w: pw, seen: make(chan struct{})}
	// The caller's end or the limit ends the stream, and the process inside is then
	// signalled by its pid (the exec subresource cannot signal it).
	sctx, ended, streamed := streamEnd(ctx, timeout, pid.seen)
	streamErr := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdout: pid, Stderr: &initErr})
	streamed()
	pw.Close()
	<-decoded
	res := &port.ExecResult{ExitCode: -1, Duration: time.Since(start)}
	res.Stdout, res.Stderr, res.StdoutTruncated, res.StderrTruncated = out.result()
	var ee utilexec.ExitError
	switch {
	case streamErr == nil:
		res.ExitCode = 0
	case errors.As(streamErr, &ee) && !ended():
		res.ExitCode = ee.ExitStatus()
	case ended():
		// Ending the stream leaves the process running: signal it.
		s.stopExec(ctx, pid.pid())
		cause := fmt.Errorf("exec exceeded its %v limit", timeout)
		if ctx.Err() != nil {
			cause = context.Cause(ctx)
		}
		return res, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeTimeout, Err: cause})
	default:
		select {
		case <-s.Done():
			return res, opErr("Exec", s.RunID(), fmt.Errorf("%w: session has ended: %w", port.ErrClosed, streamErr))
		default:
		}
		return res, opErr("Exec", s.RunID(), classify(streamErr))
	}
	if res.ExitCode == bridgeapi.ExitNotFound || res.ExitCode == bridgeapi.ExitCannotExec {
		if why, ok := bridgeapi.ExecFailure(res.Stderr[max(0, len(res.Stderr)-4096):]); ok {
			return res, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeContainerFailed, Err: errors.New(why)})
		}
		if b := initErr.Bytes(); len(b) > 0 {
			return res, opErr("Exec", s.RunID(), &port.RunError{Code: port.CodeContainerFailed, Err: errors.New(string(bytes.TrimSpace(b)))})
		}
	}
	return res, nil
}

// stopExec sends SIGTERM to an abandoned exec's init (another exec of the init's kill
// mode), which passes it to the bridge and so to the command; the exec's bridge ends
// it by its deadline anyway. Best effort, bounded by the cleanup timeout.
func (s *kubeSession) stopExec(ctx context.Context, pid int) {
	if pid <= 1 {
		return
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.r.cfg.cleanupTimeout, 10*time.Second))
	defer cancel()
	req := s.r.cli.CoreV1().RESTClient().Post().Namespace(s.r.cfg.namespace).Resource("pods").Name(s.ID()).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: agentName, Command: []string{initTarget, "kill", "-TERM", strconv.Itoa(pid)}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := s.executor(req.URL())
	if err == nil {
		err = ex.StreamWithContext(kctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
	}
	if err != nil {
		s.r.cfg.logger.Debug("session: signalling an abandoned exec failed; its bridge ends it at its deadline", logattr.RunID, s.RunID(), logattr.Err, err)
	}
}

// streamEnd returns an exec stream's context, which ends when ctx ends or limit passes,
// but only once the init's pid frame arrived (seen closed) or execPidGrace passed: the
// kill that follows needs the pid, the stream's first frame, and an end that came
// before it would leave the process running to its bridge's deadline, minutes away.
// ended reports whether the stream was ended that way; streamed must be called when
// the stream is over.
func streamEnd(ctx context.Context, limit time.Duration, seen <-chan struct{}) (sctx context.Context, ended func() bool, streamed func()) {
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	over := make(chan struct{})
	var end atomic.Bool
	go func() {
		t := time.NewTimer(limit)
		defer t.Stop()
		select {
		case <-over:
			return
		case <-ctx.Done():
		case <-t.C:
		}
		end.Store(true)
		wait := time.NewTimer(execPidGrace)
		defer wait.Stop()
		select {
		case <-seen:
		case <-wait.C:
		case <-over:
		}
		stop()
	}()
	return sctx, end.Load, func() { close(over); stop() }
}

// execPidGrace bounds how long an exec ended by its caller or its limit waits for the
// init's pid frame, which its kill needs.
const execPidGrace = 10 * time.Second

// pidSniffer passes an exec's stdout on, reading the init's "p <pid>" frame from its
// first line; seen is closed once that line is read.
type pidSniffer struct {
	w     io.Writer
	seen  chan struct{}
	mu    sync.Mutex
	first []byte
	done  bool
	n     int
}

func (p *pidSniffer) Write(b []byte) (int, error) {
	p.mu.Lock()
	if !p.done {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.first = append(p.first, b...)
		} else {
			p.first = append(p.first, b[:i]...)
			p.done = true
			if v, ok := bytes.CutPrefix(p.first, []byte("p ")); ok {
				p.n, _ = strconv.Atoi(string(v))
			}
		}
		if len(p.first) > 32 {
			p.done = true
		}
		if p.done && p.seen != nil {
			close(p.seen)
		}
	}
	p.mu.Unlock()
	return p.w.Write(b)
}

func (p *pidSniffer) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// executor streams over SPDY, a POST that the Role's create on pods/exec authorizes
// (the API server of 1.36 authorizes the WebSocket form, a GET, with get as well),
// and falls back to WebSocket where the server or a proxy in between refuses the
// SPDY upgrade (that needs get on pods/exec too).
func (s *kubeSession) executor(u *url.URL) (remotecommand.Executor, error) {
	spdy, err := remotecommand.NewSPDYExecutor(s.r.cfg.restConfig, "POST", u)
	if err != nil {
		return nil, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(s.r.cfg.restConfig, "GET", u.String())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(spdy, ws, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// limitedBuffer keeps the first 4 KiB written (the init's own complaints).
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 4096 - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf)
}
