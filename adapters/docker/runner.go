package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/bgclean"
	"github.com/agentsandbox/sandbox/internal/runner/capture"
	"github.com/agentsandbox/sandbox/internal/runner/imagepull"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/internal/runner/warmpool"
	"github.com/agentsandbox/sandbox/port"
)

// Runner runs sandboxes on a Docker engine. It is safe for concurrent use.
type Runner struct {
	cfg     config
	cleanup *bgclean.Queue // removals of finished runs, off the critical path

	pools warmpool.Open[*Pool] // open warm pools, closed with the runner
}

var (
	_ port.SandboxRunner = (*Runner)(nil)
	_ port.Sweeper       = (*Runner)(nil)
)

// NewRunner returns a Runner. It does no I/O; use Ping to check the daemon.
func NewRunner(opts ...Option) (*Runner, error) {
	cfg := defaultConfig(ctorRunner)
	if err := cfg.apply(opts); err != nil {
		return nil, opErr("NewRunner", "", err)
	}
	if err := cfg.connect(); err != nil {
		return nil, opErr("NewRunner", "", err)
	}
	cfg.logger = cfg.logger.With(logattr.Component, "docker.runner")
	return &Runner{cfg: cfg, cleanup: bgclean.New(cfg.cleanupConcurrency)}, nil
}

// Ping checks that the daemon answers. Errors wrap port.ErrUnavailable.
func (r *Runner) Ping(ctx context.Context) error {
	if _, err := r.cfg.api.Ping(ctx, client.PingOptions{}); err != nil {
		return opErr("Ping", "", fmt.Errorf("%w: %w", port.ErrUnavailable, err))
	}
	return nil
}

// Close closes the runner's warm pools, waits (up to the cleanup timeout) for the
// removals of finished runs still in the background, then releases the SDK client
// (unless it was passed in with WithClient). What a removal could not finish stays
// labelled for Sweep.
func (r *Runner) Close() error {
	warmpool.Shutdown(r.pools.Close(), r.cleanup, r.cfg.cleanupTimeout, r.cfg.logger)
	return r.cfg.api.Close()
}

// Drain waits until the removals of the runs that have returned so far are done, or
// until ctx ends (see WithCleanupConcurrency).
func (r *Runner) Drain(ctx context.Context) error {
	if err := r.cleanup.Wait(ctx); err != nil {
		return opErr("Drain", "", err)
	}
	return nil
}

// Runtime returns the OCI runtime name sandboxes run with ("" for the daemon's default).
func (r *Runner) Runtime() string { return r.cfg.runtime }

// Owner returns the owner label value of the resources this runner creates.
func (r *Runner) Owner() string { return r.cfg.owner }

// RunOnce implements port.SandboxRunner.
func (r *Runner) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	return runner.Lifecycle(ctx, "docker.RunOnce", spec, &oneShot{r: r})
}

// createHeld takes the run's lease, held while this process runs it (another
// process's Sweep leaves the run alone while this process lives; it is released once the
// removal is done), and creates the run's container. A lease it cannot take is a
// *leaseError (nothing was created).
func (r *Runner) createHeld(ctx context.Context, spec port.RunSpec, entrypoint []string, start time.Time) (string, *runlease.Lease, error) {
	lease, err := runlease.Hold(runlease.DefaultRoot(), r.cfg.owner, spec.RunID, runlease.KindRun)
	if err != nil {
		return "", nil, &leaseError{fmt.Errorf("%w: %w", port.ErrInternal, err)}
	}
	cfg, hc := sandboxConfig(spec, entrypoint, runner.ResourceLabels(r.cfg.owner, spec.RunID, port.KindSandbox, spec.Labels, start), r.cfg.bridgePath)
	hc.Runtime = r.cfg.runtime
	made, err := r.cfg.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: containerName(spec.RunID), Config: cfg, HostConfig: hc,
	})
	if err != nil {
		lease.Release()
		return "", nil, r.createError(ctx, spec.Image, err)
	}
	return made.ID, lease, nil
}

// leaseError is a run's lease that could not be taken.
type leaseError struct{ error }

func (e *leaseError) Unwrap() error { return e.error }

// captureOutput copies the attached streams into capped buffers; collect waits
// (bounded) for them to end and puts what they captured into res.
func captureOutput(att client.ContainerAttachResult, spec port.RunSpec, res *port.RunResult, log *slog.Logger) (stderr *capture.Buffer, collect func()) {
	stdout := &capture.Buffer{Max: spec.OutputLimit, Live: spec.Stdout}
	stderr = &capture.Buffer{Max: spec.OutputLimit, Live: spec.Stderr}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, att.Reader)
		copied <- err
	}()
	return stderr, func() {
		// The attach stream ends when the container exits; bound the wait in case the
		// daemon keeps it open.
		select {
		case <-copied:
		case <-time.After(5 * time.Second):
			log.Warn("output stream did not end after exit")
		}
		att.Close()
		res.Stdout, res.StdoutTruncated = stdout.Result()
		res.Stderr, res.StderrTruncated = stderr.Result()
	}
}

// exitResult classifies a container that exited with status: the failure code and
// cause ("" when the run completed): the exec failed, it was removed under the run
// (what names it in that message), or it was OOM-killed.
func (r *Runner) exitResult(ctx context.Context, id string, status int64, res *port.RunResult, stderr *capture.Buffer, spec port.RunSpec, what string) (port.ErrorCode, error) {
	if reason, ok := runner.ExecFailed(r.cfg.bridgePath != "", res.ExitCode, stderr.Tail()); ok {
		return port.CodeContainerFailed, errors.New(reason)
	}
	// Only a SIGKILLed process can have been OOM-killed; skip the inspect otherwise.
	if status != 137 {
		return "", nil
	}
	if r.removedUnderUs(ctx, id) {
		return port.CodeInternal, fmt.Errorf("%w: the %s was removed while the run went on (exit %d is the removal's kill, not the agent's)", port.ErrRemoved, what, status)
	}
	var oom bool
	if r.cfg.bridgePath != "" {
		// The bridge counted the kill in the sandbox's own cgroup: exact, whatever
		// Docker's OOM event does.
		res.Stderr, oom = capture.TrimNotice(res.Stderr, stderr.Tail(), bridgeapi.OOMNotice)
	}
	if !oom && (r.cfg.bridgePath == "" || !r.bridgeSeesOOM()) {
		// Docker sets its flag from the runtime's OOM event, which can come after
		// the exit (or, when the cgroup is gone first, never): give it a bounded
		// moment. Configure a bridge for an exact answer.
		var err error
		if oom, err = r.oomKilled(ctx, id); err != nil {
			return port.CodeInternal, err
		}
	}
	if oom {
		return port.CodeOOMKilled, fmt.Errorf("memory limit %d bytes reached", spec.Limits.MemoryBytes)
	}
	return "", nil
}

// waitFailed is the cause of a failed wait on container id: its removal by someone
// else when that is what happened (what names it in the message), else the wait's
// own error.
func (r *Runner) waitFailed(ctx context.Context, id string, err error, what string) error {
	if r.removedUnderUs(ctx, id) {
		return fmt.Errorf("%w: the %s was removed while the run went on: %w", port.ErrRemoved, what, classify(err))
	}
	return fmt.Errorf("wait: %w", classify(err))
}

// removedBeforeRun is the cause of a run whose container someone else removed before
// it ran: what failed (its attach or start) is named, wrapped in port.ErrRemoved, as a
// removal while it runs is.
func removedBeforeRun(what string, err error) error {
	return fmt.Errorf("%w: the container was removed before it ran (%s: %w)", port.ErrRemoved, what, classify(err))
}

// removedUnderUs reports whether someone else removed (or is removing) the run's
// container: this process removes it only after the result is in.
func (r *Runner) removedUnderUs(ctx context.Context, id string) bool {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ins, err := r.cfg.api.ContainerInspect(ictx, id, client.ContainerInspectOptions{})
	if err != nil {
		return errors.Is(classify(err), port.ErrNotFound)
	}
	st := ins.Container.State
	return st != nil && (st.Status == "removing" || st.Dead)
}

// check validates spec against the host: the fields, and that bind sources exist.
func (r *Runner) check(ctx context.Context, spec port.RunSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := spec.CheckHostPaths(); err != nil {
		return err
	}
	if err := spec.CheckBridge(r.cfg.bridgePath != ""); err != nil {
		return err
	}
	if n := spec.Network.Internal; n != "" {
		nw, err := r.cfg.api.NetworkInspect(ctx, n, client.NetworkInspectOptions{})
		if err != nil {
			return fmt.Errorf("network %q: %w", n, classify(err))
		}
		if !nw.Network.Internal {
			return port.Invalidf("network %q is not internal: it has a route out", n)
		}
	}
	return nil
}

// entrypoint resolves the command to run: argv, or the image's own, behind the bridge
// when one is configured (forwarding to the LLM socket when the run has one).
func (r *Runner) entrypoint(ctx context.Context, spec port.RunSpec) ([]string, error) {
	argv := spec.Argv
	if len(argv) == 0 {
		img, err := r.cfg.api.ImageInspect(ctx, spec.Image)
		if err != nil {
			if cerr := classify(err); !errors.Is(cerr, port.ErrNotFound) {
				return nil, fmt.Errorf("image %q: %w", spec.Image, cerr)
			}
			return nil, imagepull.Missing(spec.Image, "Docker", r.cfg.pullPolicy, nil)
		}
		if img.Config != nil {
			argv = append(append([]string(nil), img.Config.Entrypoint...), img.Config.Cmd...)
		}
		if len(argv) == 0 {
			return nil, port.Invalidf("no argv given and image %q has no entrypoint or cmd", spec.Image)
		}
	}
	if r.cfg.bridgePath != "" {
		return append(runner.EgressPrefix(spec, bridgeapi.Prefix(bridgeTarget, spec.LLM != nil, spec.Limits.Timeout, time.Now())), argv...), nil
	}
	return argv, nil
}

// oomKilled polls Docker's OOM flag for up to oomFlagWait.
func (r *Runner) oomKilled(ctx context.Context, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.cleanupTimeout)
	defer cancel()
	wait := oomFlagWait
	if r.cfg.bridgePath != "" && !r.bridgeSeesOOM() {
		// Under gVisor the flag is the only witness of an OOM kill: wait longer for it.
		wait = oomFlagWaitOnly
	}
	deadline := time.Now().Add(wait)
	for {
		ins, err := r.cfg.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			return false, fmt.Errorf("inspect: %w", classify(err))
		}
		if ins.Container.State != nil && ins.Container.State.OOMKilled {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// oomFlagWait bounds the wait for Docker's OOM flag after a SIGKILL exit when no
// bridge reports the kill (seen up to 0.7 s late on a loaded 2-CPU machine).
const oomFlagWait = 2 * time.Second

// oomFlagWaitOnly is the wait when Docker's flag is the only way to learn of an OOM
// kill (gVisor): only SIGKILLed runs pay it, and under load the event has come later
// than oomFlagWait.
const oomFlagWaitOnly = 10 * time.Second

// kill stops a container that outlived its run and waits (bounded) for it to exit.
func (r *Runner) kill(ctx context.Context, id string, wait client.ContainerWaitResult, log interface{ Warn(string, ...any) }) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.killGrace)
	defer cancel()
	if _, err := r.cfg.api.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		// Not running (never started, or already gone) or no daemon: no exit to await.
		log.Warn("kill failed", logattr.Err, err)
		return
	}
	select {
	case <-wait.Result:
	case <-wait.Error:
	case <-ctx.Done():
		log.Warn("container did not exit after kill")
	}
}

// remove deletes a run's container, forcing it if still running. NotFound is success.
func (r *Runner) remove(ctx context.Context, id, runID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.cleanupTimeout)
	defer cancel()
	_, err := r.cfg.api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !errors.Is(classify(err), port.ErrNotFound) {
		r.cfg.logger.Error("removing container failed; a Sweep will retry", logattr.RunID, runID, logattr.Container, short(id), logattr.Err, err)
	}
}

func containerName(runID string) string { return "agentsandbox-" + runID + "-" + randHex(4) }

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// LoadImage implements port.ImageLoader: it loads a Docker image archive (as made by
// `docker save`, or agentimage.Image.Archive) into the daemon and returns the names
// of the images it held ("name:tag", or the image ID for an untagged one). An error
// the daemon reports in its output becomes an error wrapping port.ErrInvalidSpec.
func (r *Runner) LoadImage(ctx context.Context, archive io.Reader) ([]string, error) {
	rc, err := r.cfg.api.ImageLoad(ctx, archive, client.ImageLoadWithQuiet(true))
	if err != nil {
		return nil, opErr("LoadImage", "", classify(err))
	}
	defer rc.Close()
	out, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return nil, opErr("LoadImage", "", err)
	}
	names, msg := loadOutput(out)
	if msg != "" {
		return nil, opErr("LoadImage", "", fmt.Errorf("%w: %s", port.ErrInvalidSpec, msg))
	}
	return names, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// memSampleInterval is how often a run's memory cgroup is read.
const memSampleInterval = 500 * time.Millisecond

// pid is the container's init process (the bridge), 0 when it cannot be had.
func (r *Runner) pid(ctx context.Context, id string) int {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	c, err := r.cfg.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil || c.Container.State == nil {
		return 0
	}
	return c.Container.State.Pid
}
