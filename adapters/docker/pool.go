package docker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/cgroupmem"
	"github.com/agentsandbox/sandbox/internal/runner/imagepull"
	"github.com/agentsandbox/sandbox/internal/runner/slotmount"
	"github.com/agentsandbox/sandbox/internal/runner/warmpool"
	"github.com/agentsandbox/sandbox/port"
)

// Labels of a pooled sandbox, besides the usual ones (the same keys as the containerd
// adapter's).
const (
	// LabelPool is the key of the template a pooled sandbox was made for.
	LabelPool = warmpool.LabelPool
	// LabelSlotDir is a pooled sandbox's host directory (its mount points), which
	// Sweep unmounts and removes with the container.
	LabelSlotDir = warmpool.LabelSlotDir
)

// DefaultPoolDir holds the host directories of pooled sandboxes (see WithPoolDir).
const DefaultPoolDir = "/run/agentsandbox/pool"

// DefaultPoolRefillConcurrency is PoolOptions.RefillConcurrency's default.
const DefaultPoolRefillConcurrency = 2

// poolNamePrefix names a ready sandbox; a claimed one is renamed after its run.
const poolNamePrefix = "agentsandbox-pool-"

var _ port.Pooler = (*Runner)(nil)

// Pool is a warm pool of Docker sandboxes (see port.Pooler), the same design as the
// containerd adapter's: each sandbox is a container created with the full lockdown and
// its slot directories bind-mounted with rslave propagation, started with the bridge
// as a stub entrypoint (bridge -claim) that waits on its stdin (kept attached) for the
// run. A run that matches the template claims one: its workspace, extra mounts and
// LLM socket directory are mounted on the slot's mount points (shared on the host,
// rslave in the sandbox), the container is renamed after the run (Docker's labels are
// fixed at creation; the name carries the run for Sweep), the claim line is written
// and stdin closed. The sandbox is removed after the run, as a cold one is, and the
// pool refilled. See docs/warm-pools-and-runtimes.md.
//
// A run whose spec has its own Labels or an internal network runs cold (counted in
// Stats.Other): a created container's labels and network cannot change.
type Pool struct {
	r    *Runner
	b    *warmpool.Pool[*slot, exitStatus]
	tmpl port.PoolTemplate // b's, as admitted
	// ready is the keeper's queue of the sandboxes ready for a claim, size the
	// pool's size.
	ready chan *slot
	size  int
}

var _ port.Pool = (*Pool)(nil)

// slot is one pre-created, started sandbox.
type slot struct {
	warmpool.Slot
	name   string // the container's name until its run
	id     string // container ID
	img    imageConfig
	att    *client.HijackedResponse // stdin (the claim channel), stdout and stderr
	copied chan error               // the output copy ended
	wait   client.ContainerWaitResult
	exit   chan exitStatus    // the wait's outcome, once (buffered)
	stop   context.CancelFunc // ends the wait
}

// exitStatus is a wait's outcome: the exit, or the wait's error.
type exitStatus struct {
	res container.WaitResponse
	err error
}

// imageConfig is what a run takes from its image.
type imageConfig struct {
	argv []string
	env  []string
	dir  string
}

// WarmPool implements port.Pooler: it starts keeping opts.Size sandboxes of tmpl's
// shape ready and returns at once. The runner needs a bridge (WithBridge). Close the
// pool (or the runner, which closes its pools) to remove them. Under gVisor only
// templates without a workspace, mounts or LLM socket can pool (its sandboxes do not
// see host mounts made after they start): others fail with port.ErrUnsupported.
func (r *Runner) WarmPool(ctx context.Context, tmpl port.PoolTemplate, opts port.PoolOptions) (port.Pool, error) {
	return warmpool.Port(r.NewPool(ctx, tmpl, opts))
}

// NewPool is WarmPool returning the concrete type.
func (r *Runner) NewPool(_ context.Context, tmpl port.PoolTemplate, opts port.PoolOptions) (*Pool, error) {
	p := &Pool{r: r}
	b, err := warmpool.NewPool(tmpl, opts, warmpool.Host[*slot, exitStatus]{
		Admission: warmpool.Admission{Bridge: r.cfg.bridgePath != "", LateMounts: !IsGVisor(r.Runtime()),
			Runtime: r.Runtime(), Check: func(s port.RunSpec) error { return s.Validate() }, DefaultRefill: DefaultPoolRefillConcurrency},
		Steps: warmpool.Steps[*slot, exitStatus]{Slot: p.beginSlot, Image: p.slotImage, Make: p.makeSlot,
			Exit: func(s *slot) <-chan exitStatus { return s.exit }, Code: exitCode, Destroy: p.destroy, Fits: fitsSlot,
			Check: r.check, Cold: r.RunOnce, Run: p.run, Closed: func() { r.pools.Remove(p) }},
		Engine: "docker", Supported: slotmount.Supported, Owner: r.cfg.owner, Bridge: bridgeTarget, Base: context.Background(),
		CleanupTimeout: r.cfg.cleanupTimeout, Cleanup: r.cleanup, Logger: r.cfg.logger,
	})
	if err != nil {
		return nil, err
	}
	p.b, p.tmpl, p.ready, p.size = b, b.Template(), b.Ready(), b.Size()
	if err := b.Start(func() bool { return r.pools.Add(p) }); err != nil {
		return nil, err
	}
	return p, nil
}

// Template implements port.Pool.
func (p *Pool) Template() port.PoolTemplate { return p.b.Template() }

// Stats implements port.Pool.
func (p *Pool) Stats() port.PoolStats { return p.b.Stats() }

// fitsSlot says whether a run of the template's shape can take a pooled sandbox: not
// with labels of its own or an internal network, which a created container cannot
// change.
func fitsSlot(spec port.RunSpec) bool { return len(spec.Labels) == 0 && spec.Network.Internal == "" }

// exitCode is a wait's exit code, -1 for a failed wait.
func exitCode(st exitStatus) int {
	if st.err != nil {
		return -1
	}
	return int(st.res.StatusCode)
}

// beginSlot names a new slot and gives it its directory.
func (p *Pool) beginSlot() (*slot, string) {
	name := poolNamePrefix + randHex(6)
	return &slot{Slot: warmpool.Slot{Dir: filepath.Join(p.r.poolDir(), name)}, name: name}, name[len(poolNamePrefix):]
}

// slotImage takes what a run needs of the template's image.
func (p *Pool) slotImage(ctx context.Context, s *slot) error {
	r := p.r
	ins, err := r.cfg.api.ImageInspect(ctx, p.tmpl.Image)
	if err != nil {
		if cerr := classify(err); !errors.Is(cerr, port.ErrNotFound) {
			return fmt.Errorf("image %q: %w", p.tmpl.Image, cerr)
		}
		return imagepull.Missing(p.tmpl.Image, "Docker", r.cfg.pullPolicy, nil)
	}
	if c := ins.Config; c != nil {
		s.img = imageConfig{argv: append(append([]string(nil), c.Entrypoint...), c.Cmd...), env: c.Env, dir: c.WorkingDir}
	}
	return nil
}

// makeSlot creates and starts a slot's sandbox: a container whose mounts of the slot's
// directories are rslave, attached (stdin is the claim channel) and waited on.
func (p *Pool) makeSlot(ctx context.Context, s *slot, spec port.RunSpec, lbls map[string]string, stub warmpool.Stub) error {
	r := p.r
	cfg, hc := sandboxConfig(spec, stub.Argv, lbls, r.cfg.bridgePath)
	hc.Runtime = r.cfg.runtime
	for i, m := range hc.Mounts {
		if m.Type == mount.TypeBind && strings.HasPrefix(m.Source, s.Dir+"/") {
			hc.Mounts[i].BindOptions = &mount.BindOptions{Propagation: mount.PropagationRSlave}
		}
	}
	// The stub's stdin is the claim channel: kept open by our attach until the claim,
	// closed after it (StdinOnce). A host that dies closes it too, and the stub exits.
	cfg.OpenStdin, cfg.StdinOnce, cfg.AttachStdin = true, true, true
	created, err := r.cfg.api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: s.name, Config: cfg, HostConfig: hc})
	if err != nil {
		return fmt.Errorf("create: %w", r.createError(ctx, p.tmpl.Image, err))
	}
	s.id = created.ID
	att, err := r.cfg.api.ContainerAttach(ctx, s.id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return fmt.Errorf("attach: %w", classify(err))
	}
	s.att = &att.HijackedResponse
	s.copied = make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(s.Stdout, s.Stderr, s.att.Reader)
		s.copied <- err
	}()
	wctx, stop := context.WithCancel(context.WithoutCancel(p.b.Ctx()))
	s.stop = stop
	s.wait = r.cfg.api.ContainerWait(wctx, s.id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	s.exit = make(chan exitStatus, 1)
	go func() {
		select {
		case w := <-s.wait.Result:
			s.exit <- exitStatus{res: w}
		case err := <-s.wait.Error:
			s.exit <- exitStatus{err: err}
		}
	}()
	if _, err := r.cfg.api.ContainerStart(ctx, s.id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start: %w", classify(err))
	}
	s.Mem, _ = cgroupmem.ForPID(r.pid(ctx, s.id))
	return nil
}

// RunOnce implements port.SandboxRunner: a run of the pool's shape takes a ready
// sandbox, any other run (or one that finds the pool empty) runs cold on the runner.
func (p *Pool) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	return p.b.RunOnce(ctx, spec)
}

// run runs the claimed run in the slot s (warmpool.Steps.Run).
func (p *Pool) run(ctx context.Context, claim *warmpool.Claim, s *slot) (*warmpool.Result, error) {
	r, spec := p.r, claim.Spec
	c := &claimed{Claim: claim, p: p, s: s}
	c.Log = r.cfg.logger.With(logattr.RunID, spec.RunID, logattr.Container, short(s.id))
	// The run's identity is the container's name.
	msg, failed, err := c.Begin(func() { r.nameAfterRun(s.id, spec.RunID, c.Log) }, s.img.argv, claimEnv(spec, s.img.env), s.img.dir)
	if failed != nil {
		return failed, err
	}
	res := c.Res
	c.Mem = cgroupmem.StartClaimed(s.Mem, memSampleInterval)
	defer func() { res.Memory = cgroupmem.Ended(c.Mem.Stop(), res.ErrorCode == port.CodeOOMKilled) }()
	if err := s.writeClaim(msg); err != nil {
		return c.Fail(port.CodeContainerFailed, fmt.Errorf("claim: %w", err))
	}
	return c.await(ctx)
}

// claimed is a run in a claimed slot, once its claim line is on the way.
type claimed struct {
	*warmpool.Claim
	p *Pool
	s *slot
}

// await waits for the run's end: the stub's exit records (its output whole), else
// Docker's exit report, else the run's deadline.
func (c *claimed) await(ctx context.Context) (*warmpool.Result, error) {
	r, s, res := c.p.r, c.s, c.Res
	runCtx, cancel := context.WithTimeout(ctx, c.Spec.Limits.Timeout)
	defer cancel()
	records := c.Watch.Done()
	for {
		select {
		case <-records:
			// A SIGKILL (137) may be an OOM kill or someone else's removal, which
			// Docker's own exit report tells apart: wait for it then.
			if code := c.Watch.Code(); code != 128+9 {
				c.Output()
				return c.exited(ctx, code)
			}
			records = nil
		case st := <-s.exit:
			s.Exited.Store(true)
			c.collect()
			if st.err != nil {
				return c.Fail(port.CodeInternal, r.waitFailed(ctx, s.id, st.err, "pooled sandbox"))
			}
			if w := st.res; w.Error != nil && w.Error.Message != "" {
				res.ExitCode = int(w.StatusCode)
				return c.Fail(port.CodeInternal, errors.New(w.Error.Message))
			}
			return c.exited(ctx, int(st.res.StatusCode))
		case <-runCtx.Done():
			cause := runner.DeadlineCause(ctx, c.Spec.Limits.Timeout)
			c.Mem.Sample()
			cause = cgroupmem.Hint(cause, c.Mem.Stop(), time.Since(c.Start))
			r.killSlot(ctx, s, c.Log)
			c.collect()
			return c.Fail(port.CodeTimeout, cause)
		}
	}
}

// collect takes the output once the sandbox exited: the attach stream's end (bounded),
// and what the watch held back as a possible record's start.
func (c *claimed) collect() {
	select {
	case <-c.s.copied:
	case <-time.After(5 * time.Second):
		c.Log.Warn("output stream did not end after exit")
	}
	c.Collected()
}

// exited classifies the run's exit status, however it came (res has the output).
func (c *claimed) exited(ctx context.Context, status int) (*warmpool.Result, error) {
	p, res := c.p, c.Res
	res.Duration = time.Since(c.Start)
	res.ExitCode = status
	if gone, ok := c.PreloadGone(); ok {
		return gone, nil
	}
	// A pool always has the bridge: the runner's classification is the pool's.
	if code, cause := p.r.exitResult(ctx, c.s.id, int64(status), res, c.Stderr, c.Spec, "pooled sandbox"); code != "" {
		return c.Fail(code, c.MissingEntry(code, cause))
	}
	return &warmpool.Result{RunResult: res}, nil
}

// nameAfterRun renames a claimed slot's container after its run, so Sweep by run
// ID finds it. It runs beside the run, with its own bounded context: a failure
// only leaves the pool's name on it.
func (r *Runner) nameAfterRun(id, runID string, log interface{ Warn(string, ...any) }) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.cleanupTimeout)
	defer cancel()
	if _, err := r.cfg.api.ContainerRename(ctx, id, client.ContainerRenameOptions{NewName: containerName(runID)}); err != nil {
		log.Warn("naming the claimed sandbox after its run failed", logattr.Err, err)
	}
}

// writeClaim hands the stub its claim message on the attached stdin, then closes
// the write side so the stub sees the end of it.
func (s *slot) writeClaim(msg []byte) error {
	if _, err := s.att.Conn.Write(msg); err != nil {
		return err
	}
	return s.att.CloseWrite()
}

// killSlot stops a claimed sandbox that outlived its run and waits (bounded) for it
// to exit.
func (r *Runner) killSlot(ctx context.Context, s *slot, log interface{ Warn(string, ...any) }) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.killGrace)
	defer cancel()
	if _, err := r.cfg.api.ContainerKill(ctx, s.id, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		log.Warn("kill failed", logattr.Err, err)
	}
	select {
	case <-s.exit:
		s.Exited.Store(true)
	case <-ctx.Done():
		log.Warn("container did not exit after kill")
	}
}

// claimEnv is the environment a cold run of spec gets: the image's, with each
// variable of port.RunSpec.SandboxEnv replacing one of the same name (Docker merges
// them so for a container created with the run).
func claimEnv(spec port.RunSpec, image []string) []string {
	return port.MergeEnv(image, port.EnvList(spec.SandboxEnv()))
}

// destroy removes a slot whatever state it is in: its container (forced), its attach
// and wait, the mounts on its directory, and the directory. NotFound is success; what
// fails stays labelled for Sweep.
func (p *Pool) destroy(s *slot) {
	r := p.r
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.cleanupTimeout)
	defer cancel()
	if s.id != "" {
		if _, err := r.cfg.api.ContainerRemove(ctx, s.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !errors.Is(classify(err), port.ErrNotFound) && !r.goneAfterRemoval(ctx, s.id) {
			r.cfg.logger.Error("removing a pooled sandbox failed; a Sweep will retry", logattr.Container, short(s.id), logattr.Err, err)
			p.release(s)
			s.ReleaseLeases()
			return
		}
	}
	p.release(s)
	s.Removed(r.cfg.logger)
}

// goneAfterRemoval waits (until ctx ends) for a container that someone else is
// removing to be gone, and says whether it is: then its slot directory can go too.
func (r *Runner) goneAfterRemoval(ctx context.Context, id string) bool {
	for r.removedUnderUs(ctx, id) {
		if _, err := r.cfg.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); errors.Is(classify(err), port.ErrNotFound) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

// release ends the slot's connections to the daemon.
func (p *Pool) release(s *slot) {
	if s.att != nil {
		s.att.Close()
	}
	if s.stop != nil {
		s.stop()
	}
}

// Close implements port.Pool: no more refills, ready sandboxes removed, used ones'
// removals waited for (until ctx ends). Runs in progress finish.
func (p *Pool) Close(ctx context.Context) error { return p.b.Close(ctx) }

// poolDir is where slot directories live: one per pooled sandbox, named after it.
func (r *Runner) poolDir() string {
	return r.cfg.poolRoot()
}

// pooledRun reports whether a container named name is a pooled sandbox claimed by
// runID (see containerName).
func pooledRun(name, runID string) bool {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(name, "/"), "agentsandbox-")
	if !ok || len(rest) < 10 || rest[len(rest)-9] != '-' {
		return false
	}
	return rest[:len(rest)-9] == runID
}
