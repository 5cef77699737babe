package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cgroup1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	cgroup2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/ctxsleep"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/bgclean"
	"github.com/agentsandbox/sandbox/internal/runner/capture"
	"github.com/agentsandbox/sandbox/internal/runner/cgroupmem"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/internal/runner/warmpool"
	"github.com/agentsandbox/sandbox/port"
)

// Runner runs sandboxes on containerd. It is safe for concurrent use.
type Runner struct {
	cfg     config
	cli     *client.Client
	dialed  atomic.Bool    // the socket answered once
	images  sync.Map       // name@digest -> *imageInfo
	cleanup *bgclean.Queue // removals of finished runs, off the critical path

	oom struct { // the shared OOM event subscription (see watchOOM)
		mu   sync.Mutex
		subs map[string]func() // container ID -> callback
		stop context.CancelFunc
	}

	pools warmpool.Open[*Pool] // open pools, closed with the runner
}

var (
	_ port.SandboxRunner = (*Runner)(nil)
	_ port.Sweeper       = (*Runner)(nil)
)

// NewRunner returns a Runner. It does no I/O (the gRPC connection is made on first
// use); use Ping to check the daemon.
func NewRunner(opts ...Option) (*Runner, error) {
	cfg := defaultConfig()
	if err := optcheck.Apply(&cfg, opts); err != nil {
		return nil, opErr("NewRunner", "", err)
	}
	cli, err := client.New(cfg.address, client.WithDefaultNamespace(cfg.namespace))
	if err != nil {
		return nil, opErr("NewRunner", "", fmt.Errorf("%w: %v", port.ErrInvalidSpec, err))
	}
	cfg.logger = cfg.logger.With(logattr.Component, "containerd.runner")
	return &Runner{cfg: cfg, cli: cli, cleanup: bgclean.New(cfg.cleanupConcurrency)}, nil
}

// Ping checks that the daemon answers. Errors wrap port.ErrUnavailable.
func (r *Runner) Ping(ctx context.Context) error {
	if err := r.reachable(); err != nil {
		return opErr("Ping", "", err)
	}
	if _, err := r.cli.Version(r.ns(ctx)); err != nil {
		return opErr("Ping", "", fmt.Errorf("%w: %w", port.ErrUnavailable, err))
	}
	return nil
}

// Close closes the runner's warm pools, waits (up to the cleanup timeout) for the removals of finished runs still in
// the background, then closes the connection to the daemon. What a removal could not
// finish stays labelled for Sweep.
func (r *Runner) Close() error {
	warmpool.Shutdown(r.pools.Close(), r.cleanup, r.cfg.cleanupTimeout, r.cfg.logger)
	r.oom.mu.Lock()
	if r.oom.stop != nil {
		r.oom.stop()
	}
	r.oom.mu.Unlock()
	return r.cli.Close()
}

// Drain waits until the removals of the runs that have returned so far are done, or
// until ctx ends. RunOnce returns a run's result before its task, container and
// snapshot are removed (see WithCleanupConcurrency); Drain is for callers that need
// them gone, such as a test counting leftovers.
func (r *Runner) Drain(ctx context.Context) error {
	if err := r.cleanup.Wait(ctx); err != nil {
		return opErr("Drain", "", err)
	}
	return nil
}

// Client returns the underlying containerd client, for callers that manage images
// themselves. Calls must carry the runner's namespace (see Namespace).
func (r *Runner) Client() *client.Client { return r.cli }

// Namespace is the containerd namespace the runner works in.
func (r *Runner) Namespace() string { return r.cfg.namespace }

func (r *Runner) ns(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.namespace)
}

// reachable dials the daemon's socket once (until it succeeds), so a wrong address or a
// stopped daemon fails at once with the address in the error, instead of after gRPC
// has retried until the caller's deadline.
func (r *Runner) reachable() error {
	if r.dialed.Load() {
		return nil
	}
	conn, err := net.DialTimeout("unix", r.cfg.address, 2*time.Second)
	if err != nil {
		return fmt.Errorf("%w: containerd at %s: %v (is it running, and is this the address? WithAddress or CONTAINERD_ADDRESS sets it; Runner.Ping checks it before any run)", port.ErrUnavailable, r.cfg.address, err)
	}
	_ = conn.Close()
	r.dialed.Store(true)
	return nil
}

func (r *Runner) cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.ns(context.WithoutCancel(ctx)), r.cfg.cleanupTimeout)
}

// RunOnce implements port.SandboxRunner.
func (r *Runner) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	return runner.Lifecycle(r.ns(ctx), "containerd.RunOnce", spec, &oneShot{r: r})
}

// timedOut ends a run past its limit: the task is killed and its exit awaited within
// the kill grace, and the output collected until then. It returns the run's cause,
// with a memory-pressure hint when mem (may be nil) saw the sandbox stall.
func (r *Runner) timedOut(ctx context.Context, spec port.RunSpec, task client.Task, statusC <-chan client.ExitStatus, exited *atomic.Bool, mem *cgroupmem.Sampler, ran time.Duration, collect func(time.Time), log *slog.Logger) error {
	cause := runner.DeadlineCause(ctx, spec.Limits.Timeout)
	if mem != nil {
		mem.Sample()
		cause = cgroupmem.Hint(cause, mem.Stop(), ran)
	}
	until, ok := r.stopAfterDeadline(ctx, task, statusC, log)
	if ok {
		exited.Store(true)
	} else {
		cause = r.unconfirmed(cause)
	}
	collect(until)
	return cause
}

// createHeld takes the run's lease, held while this process runs it (another
// process's Sweep leaves the run alone while this process lives; it is released once the
// removal is done), and creates its container. A lease it cannot take is ErrInternal.
func (r *Runner) createHeld(ctx context.Context, id string, spec port.RunSpec, img *imageInfo, lbls map[string]string) (*runlease.Lease, client.Container, error) {
	lease, err := runlease.Hold(runlease.DefaultRoot(), r.cfg.owner, spec.RunID, runlease.KindRun)
	if err != nil {
		return nil, nil, &leaseError{fmt.Errorf("%w: %w", port.ErrInternal, err)}
	}
	container, err := r.create(ctx, id, spec, img, lbls)
	if err != nil {
		lease.Release()
		return nil, nil, err
	}
	return lease, container, nil
}

// leaseError is a run's lease that could not be taken (nothing was created).
type leaseError struct{ error }

func (e *leaseError) Unwrap() error { return e.error }

// removeLater removes the run's task (as *task holds it when called) and
// container in the background.
func (r *Runner) removeLater(container client.Container, runID string, task *client.Task, exited, unsure *atomic.Bool, lease *runlease.Lease) {
	r.cleanup.Go(func() {
		gone := *task == nil && !unsure.Load()
		if *task != nil {
			// Before the container: only this task value holds the IO, whose Close
			// removes the FIFO directory (a task loaded again has no IO).
			gone = r.deleteTask(*task, runID, stateOf(exited.Load()))
		}
		r.remove(container, runID, gone)
		lease.Release() // the run is gone: another process's Sweep may have what is left
	})
}

// oomWitness records a run's OOM kill: by the event (seen is closed when it
// arrives) or by the task's counter.
type oomWitness struct {
	killed atomic.Bool
	seen   chan struct{}
}

// event records the OOM event (once).
func (o *oomWitness) event() {
	if o.killed.CompareAndSwap(false, true) {
		close(o.seen)
	}
}

// newTask creates container's task with its output captured into fresh buffers
// bounded by spec's output limit.
func newTask(ctx context.Context, container client.Container, spec port.RunSpec) (client.Task, *capture.Buffer, *capture.Buffer, error) {
	stdout := &capture.Buffer{Max: spec.OutputLimit, Live: spec.Stdout}
	stderr := &capture.Buffer{Max: spec.OutputLimit, Live: spec.Stderr}
	task, err := container.NewTask(ctx, cio.NewCreator(cio.WithStreams(nil, stdout, stderr)))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create task: %w", classify(err))
	}
	return task, stdout, stderr, nil
}

// exitResult classifies an exited task: its exit code into res, and the failure
// code and cause ("" when the run completed): the exec failed, it was
// OOM-killed, or the task was deleted under the run (a 137 that is the removal's
// kill, not the agent's).
func (r *Runner) exitResult(ctx context.Context, container client.Container, task client.Task, st client.ExitStatus, res *port.RunResult, stderr *capture.Buffer, oom *oomWitness, spec port.RunSpec, log *slog.Logger) (port.ErrorCode, error) {
	code, _, err := st.Result()
	if err != nil {
		return port.CodeInternal, fmt.Errorf("exit status: %w", err)
	}
	res.ExitCode = int(code)
	if reason, ok := runner.ExecFailed(r.cfg.bridgePath != "", res.ExitCode, stderr.Tail()); ok {
		return port.CodeContainerFailed, errors.New(reason)
	}
	if code == 137 && !oom.killed.Load() && r.oomCounted(ctx, task, oom.seen, log) {
		oom.killed.Store(true)
	}
	if oom.killed.Load() {
		return port.CodeOOMKilled, fmt.Errorf("memory limit %d bytes reached", spec.Limits.MemoryBytes)
	}
	if code == 137 && r.removedUnderUs(ctx, container) {
		return port.CodeInternal, fmt.Errorf("%w: the task was deleted while the run went on (exit %d is the removal's kill, not the agent's)", port.ErrRemoved, res.ExitCode)
	}
	return "", nil
}

// collectOutput waits (until the given time) for the task's streams to end and puts
// what they captured into res.
func collectOutput(task client.Task, until time.Time, res *port.RunResult, stdout, stderr *capture.Buffer, log *slog.Logger) {
	waitIO(task.IO(), until, log)
	res.Stdout, res.StdoutTruncated = stdout.Result()
	res.Stderr, res.StderrTruncated = stderr.Result()
	// The task's cgroup counter below is the truth; the bridge's notice is removed.
	res.Stderr, _ = capture.TrimNotice(res.Stderr, stderr.Tail(), bridgeapi.OOMNotice)
}

// oomCounted says whether a task that exited 137 was OOM-killed. The /tasks/oom
// event races the exit (and is dropped when the shim sees the cgroup gone first),
// so the counter decides: the shim keeps the task's cgroup until the task is
// deleted, which happens only after this. Without the counter it waits briefly for
// the event.
func (r *Runner) oomCounted(ctx context.Context, task client.Task, oomSeen <-chan struct{}, log *slog.Logger) bool {
	n, err := oomKills(ctx, task)
	if err != nil {
		log.Warn("reading the task's OOM counter failed; relying on the OOM event", logattr.Err, err)
		select {
		case <-oomSeen:
		case <-time.After(time.Second):
		}
		return false
	}
	return n > 0
}

// ioGrace bounds the wait for a task's output to end after its exit was seen.
const ioGrace = 5 * time.Second

// waitIO waits for a task's output streams to end, until the given time.
func waitIO(io cio.IO, until time.Time, log *slog.Logger) {
	done := make(chan struct{})
	go func() { io.Wait(); close(done) }()
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn("output streams did not end in time; keeping what arrived")
	}
}

// stopAfterDeadline kills a task that ran out of time and waits for its exit, both
// within the kill grace counted from now, so that a shim that does not answer
// (stopped, wedged) cannot hold the caller past it. It returns the end of the grace,
// by which the wait for the output ends too, and whether the exit was seen. What a
// kill left unconfirmed is removed in the background (the run's deferred removal)
// and, failing that, by Sweep.
func (r *Runner) stopAfterDeadline(ctx context.Context, task client.Task, statusC <-chan client.ExitStatus, log *slog.Logger) (time.Time, bool) {
	until := time.Now().Add(r.cfg.killGrace)
	kctx, cancel := context.WithDeadline(r.ns(context.WithoutCancel(ctx)), until)
	defer cancel()
	if err := task.Kill(kctx, syscall.SIGKILL, client.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
		log.Warn("kill failed", logattr.Err, err)
	}
	select {
	case <-statusC:
		return until, true
	case <-kctx.Done():
		log.Warn("the task's exit was not seen within the kill grace; its removal goes on in the background", "grace", r.cfg.killGrace)
		return until, false
	}
}

// unconfirmed says in a timed-out run's error that its kill was not confirmed.
func (r *Runner) unconfirmed(cause error) error {
	return fmt.Errorf("%w (its kill was not confirmed within the %v kill grace: the task's shim did not answer; its removal goes on in the background, and Sweep removes what it leaves)", cause, r.cfg.killGrace)
}

// removedUnderUs reports whether someone else deleted the run's task or container
// (this process deletes them only after the result is in). A remover deletes the task
// right after the kill that ended it, so this looks for a short while.
func (r *Runner) removedUnderUs(ctx context.Context, c client.Container) bool {
	return r.notFoundSoon(ctx, func(ctx context.Context) error { _, err := c.Task(ctx, nil); return err })
}

// containerGone reports whether someone else deleted the run's container before its
// task existed (the task's create then fails). It looks for a short while, as
// removedUnderUs does: a remover may still be deleting it.
func (r *Runner) containerGone(ctx context.Context, c client.Container) bool {
	return r.notFoundSoon(ctx, func(ctx context.Context) error { _, err := c.Info(ctx); return err })
}

// notFoundSoon reports whether lookup answers NotFound within about a second.
func (r *Runner) notFoundSoon(ctx context.Context, lookup func(context.Context) error) bool {
	ctx = r.ns(context.WithoutCancel(ctx))
	for i := 0; i < 10; i++ {
		if errdefs.IsNotFound(lookup(ctx)) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// removedBeforeRun is the cause of a run whose sandbox someone else deleted before
// its task ran: what failed (the task's create, wait or start) is named, wrapped in
// port.ErrRemoved, as a removal while it runs is.
func removedBeforeRun(what string, err error) error {
	return fmt.Errorf("%w: the sandbox was deleted before its task ran (%s: %w)", port.ErrRemoved, what, classify(err))
}

func (r *Runner) check(spec port.RunSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if spec.Network.Internal != "" {
		return fmt.Errorf("%w: the containerd adapter has no networks (no CNI): only network=none", port.ErrUnsupported)
	}
	if err := spec.CheckBridge(r.cfg.bridgePath != ""); err != nil {
		return err
	}
	return spec.CheckHostPaths()
}

// create makes the container and its snapshot under a lease, so that a crash between
// the two leaves nothing the garbage collector cannot reclaim.
func (r *Runner) create(ctx context.Context, id string, spec port.RunSpec, img *imageInfo, lbls map[string]string, extra ...oci.SpecOpts) (client.Container, error) {
	lctx, done, err := r.cli.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(time.Hour), leases.WithLabels(map[string]string{port.LabelOwner: r.cfg.owner, port.LabelRunID: spec.RunID}))
	if err != nil {
		return nil, fmt.Errorf("lease: %w", classify(err))
	}
	// Once the container exists it holds its snapshot: the lease can go after the
	// result, and is labelled for Sweep (and expires) if the host dies first.
	defer r.cleanup.Go(func() {
		cctx, cancel := r.cleanupCtx(context.Background())
		defer cancel()
		if err := done(cctx); err != nil {
			r.cfg.logger.Warn("releasing lease failed; it expires in an hour", logattr.Err, err)
		}
	})
	newContainer := func() (client.Container, error) {
		return r.cli.NewContainer(lctx, id,
			r.withSnapshot(id, img, snapshots.WithLabels(lbls)),
			client.WithNewSpec(append(append(specOpts(spec, img, r.cfg.bridgePath), extra...), withOwnerAnnotations(r.cfg.owner, spec.RunID))...),
			client.WithContainerLabels(lbls),
			r.withRuntime(),
		)
	}
	c, err := newContainer()
	if errdefs.IsNotFound(err) {
		// The image's unpacked layers went away under the cache: look again, once.
		r.forget(img)
		if img, err = r.imageInfo(ctx, spec.Image); err == nil {
			c, err = newContainer()
		}
	}
	if err != nil {
		// A half-made snapshot is labelled; remove it now rather than at the next sweep.
		cctx, cancel := r.cleanupCtx(ctx)
		defer cancel()
		_ = r.cli.SnapshotService(r.cfg.snapshotter).Remove(cctx, id)
		return nil, fmt.Errorf("create container: %w", classify(err))
	}
	return c, nil
}

// watchOOM calls onOOM when an OOM event arrives for container id, until stop.
func (r *Runner) watchOOM(id string, onOOM func()) (stop func()) {
	w := &r.oom
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs == nil {
		w.subs = map[string]func(){}
		ctx, cancel := context.WithCancel(r.ns(context.Background()))
		w.stop = cancel
		go r.oomEvents(ctx)
	}
	w.subs[id] = onOOM
	return func() {
		w.mu.Lock()
		delete(w.subs, id)
		w.mu.Unlock()
	}
}

// oomEvents is the runner's one subscription to OOM events, shared by its runs (one
// stream per run would cost a stream set-up per run), resubscribing until Close.
func (r *Runner) oomEvents(ctx context.Context) {
	for ctx.Err() == nil {
		ch, errs := r.cli.Subscribe(ctx, `topic=="/tasks/oom"`)
	recv:
		for {
			select {
			case env := <-ch:
				if env == nil {
					break recv
				}
				ev, err := typeurl.UnmarshalAny(env.Event)
				if err != nil {
					continue
				}
				if oom, ok := ev.(*apievents.TaskOOM); ok {
					r.oom.mu.Lock()
					fn := r.oom.subs[oom.ContainerID]
					r.oom.mu.Unlock()
					if fn != nil {
						fn()
					}
				}
			case <-errs:
				break recv
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// oomKills returns the number of OOM kills in the task's memory cgroup, from the
// metrics the shim reads out of memory.oom_control (cgroup v1) or memory.events (v2).
func oomKills(ctx context.Context, task client.Task) (uint64, error) {
	m, err := task.Metrics(ctx)
	if err != nil {
		return 0, fmt.Errorf("task metrics: %w", classify(err))
	}
	if m == nil || m.Data == nil {
		return 0, errors.New("task metrics: empty")
	}
	v, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return 0, fmt.Errorf("task metrics: %w", err)
	}
	switch st := v.(type) {
	case *cgroup1stats.Metrics:
		if st.GetMemoryOomControl() == nil {
			return 0, errors.New("task metrics: no memory.oom_control")
		}
		return st.GetMemoryOomControl().GetOomKill(), nil
	case *cgroup2stats.Metrics:
		if st.GetMemoryEvents() == nil {
			return 0, errors.New("task metrics: no memory.events")
		}
		return st.GetMemoryEvents().GetOomKill(), nil
	default:
		return 0, fmt.Errorf("task metrics: unknown type %T", v)
	}
}

// deleteTask deletes a task this process created, killing it if needed, and closes
// its IO, which removes its FIFOs. NotFound is success. It reports whether the task is
// gone.
func (r *Runner) deleteTask(task client.Task, runID string, state taskState) bool {
	ctx, cancel := r.cleanupCtx(context.Background())
	defer cancel()
	err := deleteTask(ctx, task, state)
	if err != nil {
		r.cfg.logger.Error("deleting the task failed; removing the container retries", logattr.RunID, runID, logattr.Err, err)
	}
	if io := task.IO(); io != nil {
		io.Cancel()
		if err := io.Close(); err != nil {
			r.cfg.logger.Warn("closing the task's IO failed", logattr.RunID, runID, logattr.Err, err)
		}
	}
	return err == nil
}

// remove deletes the task (killing it if needed; unless taskGone), the container and
// its snapshot. NotFound is success.
func (r *Runner) remove(c client.Container, runID string, taskGone bool) {
	ctx, cancel := r.cleanupCtx(context.Background())
	defer cancel()
	if err := deleteContainer(ctx, c, taskGone); err != nil {
		r.cfg.logger.Error("removing container failed; a Sweep will retry", logattr.RunID, runID, logattr.Container, c.ID(), logattr.Err, err)
	}
}

// taskState is what a deleter knows of a task.
type taskState int

const (
	taskUnknown taskState = iota // ask the daemon
	taskExited
	taskRunning
)

func stateOf(exited bool) taskState {
	if exited {
		return taskExited
	}
	return taskRunning
}

// deleteTask deletes a task, killing it first if it still runs. NotFound is success.
// A kill of a task that has exited fails on some runtimes (runsc: the sandbox is
// gone), so an exited task is deleted without one, and a delete that fails one way
// is retried the other. On runsc the task can still be "running" to containerd for a
// moment after its exit was reported (a delete then fails its precondition): the
// delete is tried again a little later, for up to about 1.5 s.
func deleteTask(ctx context.Context, task client.Task, state taskState) error {
	wait := 50 * time.Millisecond
	for {
		err := deleteTaskOnce(ctx, task, state)
		if err == nil || !errdefs.IsFailedPrecondition(err) || wait > time.Second {
			return err
		}
		if !ctxsleep.Sleep(ctx, wait) {
			return err
		}
		wait *= 2
		state = taskUnknown
	}
}

func deleteTaskOnce(ctx context.Context, task client.Task, state taskState) error {
	if state == taskUnknown {
		state = taskRunning
		if st, err := task.Status(ctx); err == nil && st.Status == client.Stopped {
			state = taskExited
		}
	}
	kill := []client.ProcessDeleteOpts{client.WithProcessKill}
	first, second := kill, []client.ProcessDeleteOpts(nil)
	if state == taskExited {
		first, second = second, first
	}
	_, err := task.Delete(ctx, first...)
	if err != nil && !errdefs.IsNotFound(err) {
		_, err = task.Delete(ctx, second...)
	}
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete task: %w", err)
	}
	return nil
}

// deleteContainer deletes a container with its snapshot, and its task first unless
// taskGone. NotFound is success.
func deleteContainer(ctx context.Context, c client.Container, taskGone bool) error {
	if !taskGone {
		task, err := c.Task(ctx, nil)
		switch {
		case err == nil:
			if err := deleteTask(ctx, task, taskUnknown); err != nil {
				return err
			}
		case !errdefs.IsNotFound(err):
			return fmt.Errorf("load task: %w", err)
		}
	}
	if err := c.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container: %w", err)
	}
	return nil
}

// LoadImage imports an image archive (`docker save` or OCI layout) into the runner's
// namespace and unpacks it. It returns the names of the images in the archive, as
// containerd names them (e.g. "docker.io/library/agent:1"); it writes no progress
// output. When every image the archive names is already there with the same content
// and unpacked (loaded by another process, say), the import is skipped: the archive
// is only read and hashed. An archive that is not an io.ReadSeeker is copied to a
// temporary file first.
func (r *Runner) LoadImage(ctx context.Context, archive io.Reader) ([]string, error) {
	return r.loadImage(ctx, archive, true)
}

func (r *Runner) loadImage(ctx context.Context, archive io.Reader, skipPresent bool) ([]string, error) {
	ctx = r.ns(ctx)
	if err := r.reachable(); err != nil {
		return nil, opErr("LoadImage", "", err)
	}
	if skipPresent {
		rs, done, err := seekable(archive)
		if err != nil {
			return nil, opErr("LoadImage", "", err)
		}
		defer done()
		start, err := rs.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, opErr("LoadImage", "", err)
		}
		if names, ok := r.present(ctx, rs); ok {
			return names, nil
		}
		if _, err := rs.Seek(start, io.SeekStart); err != nil {
			return nil, opErr("LoadImage", "", err)
		}
		archive = rs
	}
	imgs, err := r.cli.Import(ctx, archive)
	if err != nil {
		return nil, opErr("LoadImage", "", classify(err))
	}
	names := make([]string, 0, len(imgs))
	for _, i := range imgs {
		img := client.NewImageWithPlatform(r.cli, i, nil)
		if err := img.Unpack(ctx, r.cfg.snapshotter); err != nil {
			return nil, opErr("LoadImage", "", fmt.Errorf("unpack %s: %w", i.Name, classify(err)))
		}
		names = append(names, i.Name)
	}
	return names, nil
}

// maxContainerID is containerd's limit on a container ID (identifiers.Validate).
const maxContainerID = 76

// containerID names a run's container: the prefix, as much of the run ID as fits in
// containerd's limit (a run ID of port.MaxRunIDLen bytes does not: its label carries
// it whole) and a random suffix that keeps the name unique.
func containerID(runID string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	const prefix, suffix = len("agentsandbox-"), 1 + 2*len(b)
	if n := maxContainerID - prefix - suffix; len(runID) > n {
		runID = runID[:n]
	}
	return "agentsandbox-" + runID + "-" + hex.EncodeToString(b[:])
}

func parseUser(u string) (uint32, uint32) {
	uidS, gidS, ok := strings.Cut(u, ":")
	uid, _ := strconv.ParseUint(uidS, 10, 32)
	gid := uid
	if ok {
		gid, _ = strconv.ParseUint(gidS, 10, 32)
	}
	return uint32(uid), uint32(gid)
}

// memSampleInterval is how often a run's memory cgroup is read.
const memSampleInterval = 500 * time.Millisecond
