package containerd

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/capture"
	"github.com/agentsandbox/sandbox/internal/runner/cgroupmem"
	"github.com/agentsandbox/sandbox/internal/runner/warmpool"
	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
)

// Labels of a pooled sandbox, besides the usual ones.
const (
	// LabelPool is the key of the template a pooled sandbox was made for.
	LabelPool = warmpool.LabelPool
	// LabelSlotDir is a pooled sandbox's host directory (its mount points), which
	// Sweep unmounts and removes with the container.
	LabelSlotDir = warmpool.LabelSlotDir
)

// DefaultPoolRefillConcurrency is PoolOptions.RefillConcurrency's default.
const DefaultPoolRefillConcurrency = 2

var _ port.Pooler = (*Runner)(nil)

// Pool is a warm pool of containerd sandboxes (see port.Pooler). Each sandbox is a
// task with its snapshot prepared and its mounts in place, and the bridge as a stub
// entrypoint that waits on its stdin for the run (bridgeapi.Claim), already started or
// (WithPoolStarted(false)) created but not started. A run that matches the template
// claims one: its workspace, extra mounts and LLM socket directory are mounted on the
// sandbox's mount points (shared on the host, rslave in the sandbox), the claim is
// written, and the task starts if it had not; the bridge reads the claim and closes its
// stdin before the agent starts, with /dev/null as stdin. The sandbox is removed after
// the run, as a cold one is, and the pool refilled. See docs/warm-pools-and-runtimes.md.
type Pool struct {
	r    *Runner
	b    *warmpool.Pool[*slot, client.ExitStatus]
	tmpl port.PoolTemplate // b's, as admitted
	// ready is the keeper's queue of the sandboxes ready for a claim, size the
	// pool's size.
	ready     chan *slot
	size      int
	unobserve func() // ends the pool's sandbox.pool.ready gauge
}

var _ port.Pool = (*Pool)(nil)

// slot is one pre-created sandbox.
type slot struct {
	warmpool.Slot
	id        string
	img       *imageInfo // what the sandbox was made of: its config is the run's
	container client.Container
	task      client.Task
	statusC   <-chan client.ExitStatus
	claim     *io.PipeWriter // the stub's stdin
	started   bool           // the stub already runs, waiting on its stdin
}

// WarmPool implements port.Pooler: it starts keeping opts.Size sandboxes of tmpl's
// shape ready and returns at once. The runner needs a bridge (WithBridge). Close the
// pool (or the runner, which closes its pools) to remove them.
func (r *Runner) WarmPool(ctx context.Context, tmpl port.PoolTemplate, opts port.PoolOptions) (port.Pool, error) {
	return warmpool.Port(r.NewPool(ctx, tmpl, opts))
}

// NewPool is WarmPool returning the concrete type.
func (r *Runner) NewPool(_ context.Context, tmpl port.PoolTemplate, opts port.PoolOptions) (*Pool, error) {
	p := &Pool{r: r}
	b, err := warmpool.NewPool(tmpl, opts, warmpool.Host[*slot, client.ExitStatus]{
		Admission: warmpool.Admission{Bridge: r.cfg.bridgePath != "", LateMounts: r.propagatesMounts(),
			Runtime: r.Runtime(), Check: r.check, DefaultRefill: DefaultPoolRefillConcurrency},
		Steps: warmpool.Steps[*slot, client.ExitStatus]{Slot: p.beginSlot, Image: p.slotImage, Make: p.makeSlot,
			Exit:    func(s *slot) <-chan client.ExitStatus { return s.statusC },
			Code:    func(st client.ExitStatus) int { return int(st.ExitCode()) },
			Destroy: p.destroy,
			Check:   func(_ context.Context, spec port.RunSpec) error { return r.check(spec) }, Cold: r.RunOnce, Run: p.run,
			Claimed: func(ctx context.Context, warm bool) { telemetry.Or(r.cfg.tel).PoolClaim(ctx, "containerd", warm) },
			Closed:  func() { p.unobserve(); r.pools.Remove(p) }},
		Engine: "containerd", Supported: poolSupported, Owner: r.cfg.owner, Bridge: bridgeTarget, Base: r.ns(context.Background()),
		CleanupTimeout: r.cfg.cleanupTimeout, Cleanup: r.cleanup, Logger: r.cfg.logger,
	})
	if err != nil {
		return nil, err
	}
	p.b, p.tmpl, p.ready, p.size = b, b.Template(), b.Ready(), b.Size()
	err = b.Start(func() bool {
		if !r.pools.Add(p) {
			return false
		}
		p.unobserve = telemetry.Or(r.cfg.tel).ObservePool("containerd", b.Key(), func() int64 { return int64(len(p.ready)) })
		return true
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Template implements port.Pool.
func (p *Pool) Template() port.PoolTemplate { return p.b.Template() }

// Stats implements port.Pool.
func (p *Pool) Stats() port.PoolStats { return p.b.Stats() }

// beginSlot names a new slot and gives it its directory.
func (p *Pool) beginSlot() (*slot, string) {
	r := p.r
	id := poolIDPrefix(r.cfg.namespace, r.cfg.owner) + randHex(6)
	return &slot{Slot: warmpool.Slot{Dir: filepath.Join(r.poolDir(), id)}, id: id}, id[len("agentsandbox-pool-"):]
}

// slotImage takes the template's image (unpacked): a run's config is its.
func (p *Pool) slotImage(ctx context.Context, s *slot) (err error) {
	s.img, err = p.r.imageInfo(ctx, p.tmpl.Image)
	return err
}

// makeSlot creates a slot's task, its stdin the claim channel, and starts it when the
// pool starts its stubs or the stub pre-boots a runtime; else it starts at the claim.
func (p *Pool) makeSlot(ctx context.Context, s *slot, spec port.RunSpec, lbls map[string]string, stub warmpool.Stub) (err error) {
	r := p.r
	s.container, err = r.create(ctx, s.id, spec, s.img, lbls, withSlotMounts(s.Dir), withStub(stub.Argv))
	if err != nil {
		return err
	}
	in, claim := io.Pipe()
	s.claim = claim
	task, err := s.container.NewTask(ctx, cio.NewCreator(cio.WithStreams(in, s.Stdout, s.Stderr)))
	if err != nil {
		_ = claim.Close()
		return fmt.Errorf("create task: %w", classify(err))
	}
	s.task = task
	// The shim keeps a writer of its own on the stub's stdin FIFO, so that the stream
	// outlives its clients: without it, this process's writer is the only one, and
	// the stub reads the end of its claim channel when this process dies, however it
	// dies. A slot then ends by itself (and its pre-booted runtime with it) instead
	// of waiting for a claim that can no longer come.
	if err := task.CloseIO(ctx, client.WithStdinCloser); err != nil {
		return fmt.Errorf("close the shim's stdin writer: %w", classify(err))
	}
	s.Mem, _ = cgroupmem.ForPID(int(task.Pid()))
	if s.statusC, err = task.Wait(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("wait: %w", classify(err))
	}
	// A pre-booted runtime boots before the claim: its stub always starts now.
	if r.cfg.poolStarted || stub.Status != nil {
		if err := task.Start(ctx); err != nil {
			return fmt.Errorf("start: %w", classify(err))
		}
		s.started = true
	}
	return nil
}

// withSlotMounts makes the sandbox's mounts of the slot's directories rslave, so the
// mounts attached to them at claim time propagate in.
func withSlotMounts(dir string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		for i, m := range s.Mounts {
			if strings.HasPrefix(m.Source, dir+"/") {
				s.Mounts[i].Options = append(m.Options, "rslave")
			}
		}
		return nil
	}
}

// withStub makes the bridge, in claim mode (args), the sandbox's process: it waits
// for the run.
func withStub(args []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.Args = args
		return nil
	}
}

// RunOnce implements port.SandboxRunner: a run of the pool's shape takes a ready
// sandbox, any other run (or one that finds the pool empty) runs cold on the runner.
func (p *Pool) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	return p.b.RunOnce(ctx, spec)
}

// run runs the claimed run in the slot s (warmpool.Steps.Run).
func (p *Pool) run(ctx context.Context, claim *warmpool.Claim, s *slot) (*warmpool.Result, error) {
	r, spec := p.r, claim.Spec
	ctx = r.ns(ctx)
	c := &claimed{Claim: claim, p: p, s: s}
	c.Log = r.cfg.logger.With("run_id", spec.RunID, "container", s.id)
	ph := telemetry.StartPhases(ctx, "sandbox.claim", telemetry.Runtime.String("containerd"), telemetry.PoolClaim.String("warm"))
	defer ph.End()
	res := c.Res
	if !s.started {
		// Started before it has the run: a start that fails or does not return in time
		// leaves a sandbox that can never run this claim, and the run goes cold.
		if err := r.startSlot(ctx, s); err != nil {
			c.Log.Warn("the pooled sandbox could not be started at the claim; the run goes cold", "err", err)
			return &warmpool.Result{RunResult: res, Broken: err.Error()}, nil
		}
	}
	// The run's identity is its labels; its command goes through the claim channel,
	// closed after it.
	img := s.img.config
	msg, failed, err := c.Begin(func() { r.labelForRun(s, p.b.Key(), spec, c.Log) },
		append(append([]string(nil), img.Entrypoint...), img.Cmd...), runEnv(spec, s.img), img.WorkingDir)
	if failed != nil {
		return failed, err
	}
	r.phase("attach")
	c.Mem = cgroupmem.StartClaimed(s.Mem, memSampleInterval)
	defer func() { res.Memory = c.Mem.Stop() }()
	s.sendClaim(msg)

	runCtx, cancel := context.WithTimeout(ctx, spec.Limits.Timeout)
	defer cancel()
	r.phase("claim")
	ph.Next("sandbox.start")
	r.phase("start") // a stub not started before the claim was started first
	ph.Next("sandbox.wait")
	return c.await(ctx, runCtx)
}

// startSlot starts the stub of a slot created but not started, bounded by the kill
// grace (a shim that does not answer is no sandbox to wait for).
func (r *Runner) startSlot(ctx context.Context, s *slot) error {
	select {
	case <-s.statusC:
		s.Exited.Store(true)
		return errors.New("its task had ended")
	default:
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.killGrace)
	defer cancel()
	if err := s.task.Start(sctx); err != nil {
		if sctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("its start was not confirmed within the %v kill grace (its shim did not answer)", r.cfg.killGrace)
		}
		return fmt.Errorf("start: %w", classify(err))
	}
	s.started = true
	return nil
}

// claimed is a run in a claimed slot, once its claim is on the way.
type claimed struct {
	*warmpool.Claim
	p *Pool
	s *slot
}

// await waits for the run's end: the stub's exit records (its output whole), else
// the task's exit, else runCtx's end (the run's deadline).
func (c *claimed) await(ctx, runCtx context.Context) (*warmpool.Result, error) {
	r, s := c.p.r, c.s
	records := c.Watch.Done()
	for {
		select {
		case <-records:
			// A SIGKILL (137) may be an OOM kill or a removal, which the task's
			// exit and its cgroup tell apart: wait for the exit then.
			if code := c.Watch.Code(); code >= 0 && code != 128+9 {
				r.phase("exit")
				c.Output()
				r.phase("output")
				return c.exited(ctx, uint32(code), nil)
			}
			records = nil
		case st := <-s.statusC:
			s.Exited.Store(true)
			r.phase("exit")
			c.collect(time.Now().Add(ioGrace))
			r.phase("output")
			code, _, err := st.Result()
			return c.exited(ctx, code, err)
		case <-runCtx.Done():
			return c.Fail(port.CodeTimeout, r.timedOut(ctx, c.Spec, s.task, s.statusC, &s.Exited, c.Mem, time.Since(c.Start), c.collect, c.Log))
		}
	}
}

// collect takes the output once the task exited: its IO's end (until the time
// given), and what the watch held back as a possible record's start.
func (c *claimed) collect(until time.Time) {
	waitIO(c.s.task.IO(), until, c.Log)
	c.Collected()
}

// exited classifies the run's exit status, however it came (res has the output).
func (c *claimed) exited(ctx context.Context, status uint32, statusErr error) (*warmpool.Result, error) {
	p, res := c.p, c.Res
	res.Duration = time.Since(c.Start)
	if code, cause := slotExitResult(ctx, c.s, status, statusErr, res, c.Stderr, c.Spec, c.Log); code != "" {
		return c.Fail(code, c.MissingEntry(code, cause))
	}
	if res.ExitCode == 137 && p.r.removedUnderUs(ctx, c.s.container) {
		return c.Fail(port.CodeInternal, fmt.Errorf("%w: the pooled sandbox was deleted while the run went on (exit %d is the removal's kill, not the agent's)", port.ErrRemoved, res.ExitCode))
	}
	if gone, ok := c.PreloadGone(); ok {
		return gone, nil
	}
	return &warmpool.Result{RunResult: res}, nil
}

// labelForRun gives a claimed slot's container the run's labels, so Sweep by run ID
// finds it, keeping the pool's and its slot directory's (Sweep removes the directory
// with the container). It runs beside the run, with its own bounded context: a
// failure only leaves the pool's labels on it.
func (r *Runner) labelForRun(s *slot, key string, spec port.RunSpec, log *slog.Logger) {
	ctx, cancel := r.cleanupCtx(context.Background())
	defer cancel()
	lbls := runner.ResourceLabels(r.cfg.owner, spec.RunID, port.KindSandbox, spec.Labels, time.Now())
	lbls[LabelPool], lbls[LabelSlotDir] = key, s.Dir
	if _, err := s.container.SetLabels(ctx, lbls); err != nil {
		log.Warn("labelling the claimed sandbox failed", "err", err)
	}
}

// sendClaim hands the stub its claim message, closing the claim channel after it.
// The write runs on its own goroutine: a pipe write returns only once the shim's
// FIFO has it, and the stub reads it only after its task starts.
func (s *slot) sendClaim(msg []byte) {
	go func() {
		_, werr := s.claim.Write(msg)
		_ = s.claim.CloseWithError(werr)
	}()
}

// slotExitResult classifies the exit of a pooled run: its exit code into res, and
// the failure code and cause ("" when the run completed): the exec failed, or it
// was OOM-killed.
func slotExitResult(ctx context.Context, s *slot, code uint32, err error, res *port.RunResult, stderr *capture.Buffer, spec port.RunSpec, log *slog.Logger) (port.ErrorCode, error) {
	if err != nil {
		return port.CodeInternal, fmt.Errorf("exit status: %w", err)
	}
	res.ExitCode = int(code)
	var noticed bool
	res.Stderr, noticed = capture.TrimNotice(res.Stderr, stderr.Tail(), bridgeapi.OOMNotice)
	if reason, ok := runner.ExecFailed(true, res.ExitCode, stderr.Tail()); ok {
		return port.CodeContainerFailed, errors.New(reason)
	}
	if code == 137 {
		// The task's cgroup counter decides (see Runner.RunOnce); the bridge's own
		// count in the sandbox's cgroup when the metrics cannot be read.
		oom := noticed
		if n, err := oomKills(ctx, s.task); err == nil {
			oom = n > 0
		} else {
			log.Warn("reading the task's OOM counter failed; relying on the bridge", "err", err)
		}
		if oom {
			return port.CodeOOMKilled, fmt.Errorf("memory limit %d bytes reached", spec.Limits.MemoryBytes)
		}
	}
	return "", nil
}

// runEnv is the environment a cold run of spec gets: the image's, with each variable
// of port.RunSpec.SandboxEnv replacing one of the same name.
func runEnv(spec port.RunSpec, img *imageInfo) []string {
	env := img.config.Env
	if len(env) == 0 {
		env = defaultUnixEnv
	}
	return port.MergeEnv(env, port.EnvList(spec.SandboxEnv()))
}

// destroy removes a slot whatever state it is in: its task (killed), its claim
// channel and IO, the mounts on its directory, its container and snapshot, and the
// directory. NotFound is success; what fails stays labelled for Sweep.
func (p *Pool) destroy(s *slot) {
	r := p.r
	ctx, cancel := r.cleanupCtx(context.Background())
	defer cancel()
	if s.claim != nil {
		_ = s.claim.CloseWithError(errors.New("slot removed"))
	}
	gone := s.task == nil
	if s.task != nil {
		gone = r.deleteTask(s.task, s.id, stateOf(s.Exited.Load()))
	}
	if s.container != nil {
		if err := deleteContainer(ctx, s.container, gone); err != nil {
			r.cfg.logger.Error("removing a pooled sandbox failed; a Sweep will retry", "container", s.id, "err", err)
			s.ReleaseLeases()
			return
		}
	}
	s.Removed(r.cfg.logger)
}

// Close implements port.Pool: no more refills, ready sandboxes removed, used ones'
// removals waited for (until ctx ends). Runs in progress finish.
func (p *Pool) Close(ctx context.Context) error { return p.b.Close(ctx) }

// poolIDPrefix starts the container id of every slot of owner's pools. The id names
// the slot's stdio FIFOs under FIFORoot, which carry no labels: the owner's tag in it
// lets a sweep or an operator attribute them (another owner's FIFOs are not ours).
func poolIDPrefix(namespace, owner string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + owner))
	return "agentsandbox-pool-" + hex.EncodeToString(sum[:4]) + "-"
}

// poolDir is where slot directories live: one per pooled sandbox, named after it.
func (r *Runner) poolDir() string {
	return filepath.Join(r.cfg.poolDir, r.cfg.namespace, r.cfg.owner)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
