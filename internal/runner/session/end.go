package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/capture"
	"github.com/agentsandbox/sandbox/port"
)

// Watchers are a handle's goroutines that follow its sandbox (its exit, its
// lifetime): Halt cancels their context and waits for them. The zero value is ready.
type Watchers struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Context returns the watchers' context, derived from parent, which Halt cancels.
func (w *Watchers) Context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	return ctx
}

// Go runs f as one of the watchers.
func (w *Watchers) Go(f func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f()
	}()
}

// Halt cancels the watchers' context and waits for them to return.
func (w *Watchers) Halt() {
	w.mu.Lock()
	cancel := w.cancel
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	w.wg.Wait()
}

// Halt ends a handle whose session could not be started or attached: the heartbeat
// and the watchers stop, why is its result.
func (h *Handle) Halt(why error) {
	h.StopHeartbeat()
	h.Watch.Halt()
	h.Finish(nil, why)
	h.CloseLog()
}

// Detach implements port.Session: the handle stops watching; the session runs on.
func (h *Handle) Detach() error {
	h.StopHeartbeat()
	h.Watch.Halt()
	h.MarkDetached()
	h.CloseLog()
	return nil
}

// Stopping reports whether the host is stopping the session: its exit is then no
// failure of the agent's.
func (h *Handle) Stopping() bool {
	h.stop.Lock()
	defer h.stop.Unlock()
	return h.stop.stopping
}

// Stopper is what a runtime does for Stop (see Handle.StopWith).
type Stopper struct {
	// Thaw, if set, runs first: a paused sandbox made ready for the signals.
	Thaw func(ctx context.Context)
	// End asks the sandbox to end and waits for it, as far as grace allows; it is
	// not called once the session has ended.
	End func(ctx context.Context)
	// Remove removes the sandbox, once nothing watches it.
	Remove func(ctx context.Context)
	// Root is the runner's session root, Log the runner's logger with the run's
	// attributes.
	Root string
	Log  *slog.Logger
}

// StopWith implements port.Session's Stop with the runtime's steps: the sandbox ends
// (st.End, unless it has), the heartbeat and the watchers stop, the sandbox and the
// session's directory go. A second Stop returns the first's result.
func (h *Handle) StopWith(ctx context.Context, st Stopper) (*port.RunResult, error) {
	h.stop.Lock()
	if h.stop.stopped {
		h.stop.Unlock()
		return h.Result()
	}
	h.stop.stopping = true
	h.stop.Unlock()
	if st.Thaw != nil {
		st.Thaw(ctx)
	}
	select {
	case <-h.Done():
	default:
		st.End(ctx)
	}
	h.StopHeartbeat()
	h.Watch.Halt()
	st.Remove(ctx)
	if err := RemoveDir(st.Root, h.Dir); err != nil {
		st.Log.Warn("session: removing its directory failed; a Sweep will retry", logattr.Err, err)
	}
	h.stop.Lock()
	h.stop.stopped = true
	h.stop.Unlock()
	h.Finish(&port.RunResult{ExitCode: -1}, nil) // no-op unless the exit was never seen
	h.CloseLog()
	return h.Result()
}

// Terminate ends a sandbox for Stop: term (SIGTERM), then up to grace for the
// session to end (less if ctx ends), then kill (SIGKILL) with a context from
// killCtx, and as long as that context lasts for the session to end.
func (h *Handle) Terminate(ctx context.Context, grace time.Duration, term func(), kill func(context.Context), killCtx func() (context.Context, context.CancelFunc)) {
	term()
	t := time.NewTimer(grace)
	select {
	case <-h.Done():
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	select {
	case <-h.Done():
	default:
		kctx, cancel := killCtx()
		defer cancel()
		kill(kctx)
		select {
		case <-h.Done():
		case <-kctx.Done():
		}
	}
}

// BeginExec applies an exec's defaults and checks it can run: a valid spec, a
// session that has not ended (port.ErrClosed) and is not paused (port.ErrPaused).
func (h *Handle) BeginExec(es port.ExecSpec) (port.ExecSpec, error) {
	es = es.WithDefaults()
	if err := es.Validate(); err != nil {
		return es, err
	}
	select {
	case <-h.Done():
		return es, fmt.Errorf("%w: session has ended", port.ErrClosed)
	default:
	}
	return es, h.CheckRunning()
}

// RemovedError is a session's end when its sandbox was removed from under it: exit
// code is the removal's kill, not the agent's.
func RemovedError(code int) error {
	return fmt.Errorf("%w: the session's sandbox was removed while it ran (exit %d is the removal's kill, not the agent's)", port.ErrRemoved, code)
}

// ExitFailure classifies the exit code of a session's sandbox as RunOnce classifies
// a run's, in this order: a command the bridge could not start (unless the host is
// stopping the session), a sandbox removed from under the session (removed, asked
// only for a kill's 137 the host did not send), the memory limit (a 137 with the
// bridge's OOM notice, or one oomKilled, if set, reports). "" is the agent's own exit.
func (h *Handle) ExitFailure(code int, stopping bool, removed, oomKilled func() bool) (port.ErrorCode, error) {
	tail := h.StderrTail(256)
	if reason, ok := runner.ExecFailed(true, code, tail); ok && !stopping {
		return port.CodeContainerFailed, errors.New(reason)
	}
	if code == 137 && !stopping && removed() {
		return port.CodeInternal, RemovedError(code)
	}
	if code == 137 {
		if _, notice := capture.TrimNotice(tail, tail, bridgeapi.OOMNotice); notice || (oomKilled != nil && oomKilled()) {
			return port.CodeOOMKilled, errors.New("memory limit reached")
		}
	}
	return "", nil
}

// ExecOutput is an exec's capped output buffers, and the writers its process gets:
// the buffers, teed to the caller's live writers when given.
func ExecOutput(es port.ExecSpec) (stdout, stderr *capture.Buffer, ow, ew io.Writer) {
	stdout = &capture.Buffer{Max: es.OutputLimit}
	stderr = &capture.Buffer{Max: es.OutputLimit}
	ow, ew = stdout, stderr
	if es.Stdout != nil {
		ow = io.MultiWriter(stdout, es.Stdout)
	}
	if es.Stderr != nil {
		ew = io.MultiWriter(stderr, es.Stderr)
	}
	return stdout, stderr, ow, ew
}
