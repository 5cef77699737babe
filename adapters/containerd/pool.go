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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/adapterutil"
	"github.com/agentsandbox/sandbox/internal/capture"
	"github.com/agentsandbox/sandbox/internal/cgroupmem"
	"github.com/agentsandbox/sandbox/internal/runlease"
	"github.com/agentsandbox/sandbox/internal/sandboxbridge"
	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
)

// Labels of a pooled sandbox, besides the usual ones.
const (
	// LabelPool is the key of the template a pooled sandbox was made for.
	LabelPool = port.LabelPrefix + "pool"
	// LabelSlotDir is a pooled sandbox's host directory (its mount points), which
	// Sweep unmounts and removes with the container.
	LabelSlotDir = port.LabelPrefix + "slot-dir"
)

// DefaultPoolRefillConcurrency is PoolOptions.RefillConcurrency's default.
const DefaultPoolRefillConcurrency = 2

// Slot directories, inside a slot's host directory. Each is a shared mount point the
// sandbox mounts rslave, so what a run attaches there at claim time appears inside.
const (
	slotWorkspace = "ws"
	slotSocket    = "sock"
	slotMount     = "m" // + index
	slotStage     = "stage"
)

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
	tmpl port.PoolTemplate
	key  string
	size int

	ready chan *slot
	sem   chan struct{} // creations in flight
	wake  chan struct{}

	ctx    context.Context // the pool's life: cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the filler and the creations

	creating                                 atomic.Int32
	warm, cold, other, failed, preloadFailed atomic.Int64
	closed                                   atomic.Bool
	unobserve                                func() // ends the pool's sandbox.pool.ready gauge
}

var _ port.Pool = (*Pool)(nil)

// slot is one pre-created sandbox.
type slot struct {
	id        string
	dir       string
	img       *imageInfo // what the sandbox was made of: its config is the run's
	container client.Container
	task      client.Task
	statusC   <-chan client.ExitStatus
	claim     *io.PipeWriter // the stub's stdin
	started   bool           // the stub already runs, waiting on its stdin
	exited    atomic.Bool    // its exit was seen
	stdout    *switchWriter
	stderr    *switchWriter
	// attestation is what the stub reported once its pre-booted runtime was ready
	// (nil without Preload).
	attestation *port.Attestation
	mem         cgroupmem.Paths // its memory cgroup, sampled from the claim
	// lease is the slot's own run lease (its pool label's run ID) from creation,
	// runLease the claiming run's from the claim, both held until the slot is removed,
	// so another process's Sweep of the owner leaves a live pool's sandboxes alone.
	lease, runLease *runlease.Lease
}

// WarmPool implements port.Pooler: it starts keeping opts.Size sandboxes of tmpl's
// shape ready and returns at once. The runner needs a bridge (WithBridge). Close the
// pool (or the runner, which closes its pools) to remove them.
func (r *Runner) WarmPool(ctx context.Context, tmpl port.PoolTemplate, opts port.PoolOptions) (port.Pool, error) {
	p, err := r.NewPool(ctx, tmpl, opts)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// NewPool is WarmPool returning the concrete type.
func (r *Runner) NewPool(_ context.Context, tmpl port.PoolTemplate, opts port.PoolOptions) (*Pool, error) {
	if !poolSupported {
		return nil, opErr("WarmPool", "", fmt.Errorf("%w: %v", port.ErrUnsupported, errNoPoolHere))
	}
	if r.cfg.bridgePath == "" {
		return nil, opErr("WarmPool", "", fmt.Errorf("%w: warm pools need the bridge (WithBridge) as the sandboxes' stub", port.ErrUnsupported))
	}
	tmpl.Limits.Timeout = 0
	if (tmpl.Workspace || tmpl.LLM || len(tmpl.Mounts) > 0) && !r.propagatesMounts() {
		return nil, opErr("WarmPool", "", fmt.Errorf("%w: runtime %s does not see host mounts made after a sandbox starts: it can pool only templates without a workspace, mounts or LLM socket", port.ErrUnsupported, r.Runtime()))
	}
	if err := r.check(tmpl.Spec("pool-template")); err != nil {
		return nil, opErr("WarmPool", "", err)
	}
	if opts.Size < 1 {
		return nil, opErr("WarmPool", "", port.Invalidf("pool size %d is less than 1", opts.Size))
	}
	if opts.RefillConcurrency < 0 {
		return nil, opErr("WarmPool", "", port.Invalidf("refill concurrency %d is negative", opts.RefillConcurrency))
	}
	if opts.RefillConcurrency == 0 {
		opts.RefillConcurrency = DefaultPoolRefillConcurrency
	}
	ctx, cancel := context.WithCancel(r.ns(context.Background()))
	p := &Pool{
		r: r, tmpl: tmpl, key: tmpl.Key(), size: opts.Size,
		ready: make(chan *slot, opts.Size), sem: make(chan struct{}, opts.RefillConcurrency), wake: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel,
	}
	r.poolsMu.Lock()
	if r.closed {
		r.poolsMu.Unlock()
		cancel()
		return nil, opErr("WarmPool", "", fmt.Errorf("%w: the runner is closed", port.ErrUnavailable))
	}
	r.pools[p] = struct{}{}
	r.poolsMu.Unlock()
	p.unobserve = telemetry.Or(r.cfg.tel).ObservePool("containerd", p.key, func() int64 { return int64(len(p.ready)) })
	p.wg.Add(1)
	go p.fill()
	return p, nil
}

var errNoPoolHere = errors.New("warm pools need Linux mount propagation")

// Template implements port.Pool.
func (p *Pool) Template() port.PoolTemplate { return p.tmpl }

// Stats implements port.Pool.
func (p *Pool) Stats() port.PoolStats {
	return port.PoolStats{
		Ready: len(p.ready), Creating: int(p.creating.Load()),
		Warm: p.warm.Load(), Cold: p.cold.Load(), Other: p.other.Load(), Failed: p.failed.Load(),
		PreloadFailed: p.preloadFailed.Load(),
	}
}

// fill keeps the pool at its size, creating at most RefillConcurrency sandboxes at
// once, until Close.
func (p *Pool) fill() {
	defer p.wg.Done()
	for {
		for len(p.ready)+int(p.creating.Load()) < p.size {
			select {
			case p.sem <- struct{}{}:
			case <-p.ctx.Done():
				return
			}
			p.creating.Add(1)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				s, err := p.newSlot()
				if err != nil {
					p.failed.Add(1)
					if errors.Is(err, errPreload) {
						p.preloadFailed.Add(1)
					}
					p.r.cfg.logger.Warn("creating a pooled sandbox failed", "pool", p.key, "err", err)
					// Back off so a broken template does not spin the machine.
					select {
					case <-time.After(time.Second):
					case <-p.ctx.Done():
					}
				} else {
					select {
					case p.ready <- s:
					default: // cannot happen while the counts hold; never leak it
						p.r.cleanup.Go(func() { p.destroy(s) })
					}
				}
				p.creating.Add(-1)
				<-p.sem
				p.signal()
			}()
		}
		select {
		case <-p.wake:
		case <-p.ctx.Done():
			return
		}
	}
}

func (p *Pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// newSlot creates one sandbox of the template, not started. It runs to the end even
// when the pool closes meanwhile (bounded by the cleanup timeout), and leaves nothing
// behind when it fails.
func (p *Pool) newSlot() (_ *slot, err error) {
	r := p.r
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), r.cfg.cleanupTimeout)
	defer cancel()
	id := poolIDPrefix(r.cfg.namespace, r.cfg.owner) + randHex(6)
	s := &slot{id: id, dir: filepath.Join(r.poolDir(), id)}
	defer func() {
		if err != nil {
			p.destroy(s) // the slot as far as it got (a named result would be nil here)
		}
	}()
	img, err := r.imageInfo(ctx, p.tmpl.Image)
	if err != nil {
		return nil, err
	}
	s.img = img
	spec := p.tmpl.Spec("pool-" + id[len("agentsandbox-pool-"):])
	if s.lease, err = holdLease(r.cfg.owner, spec.RunID); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("slot directory: %w", err)
	}
	shared := func(name string) (string, error) {
		d := filepath.Join(s.dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
		return d, makeSharedDir(d)
	}
	if spec.WorkspaceDir != "" {
		if spec.WorkspaceDir, err = shared(slotWorkspace); err != nil {
			return nil, err
		}
	}
	for i := range spec.Mounts {
		if spec.Mounts[i].Source, err = shared(slotMount + strconv.Itoa(i)); err != nil {
			return nil, err
		}
	}
	if spec.LLM != nil {
		if spec.LLM.HostDir, err = shared(slotSocket); err != nil {
			return nil, err
		}
	}
	lbls := adapterutil.ResourceLabels(r.cfg.owner, spec.RunID, port.KindSandbox, map[string]string{LabelPool: p.key, LabelSlotDir: s.dir}, time.Now())
	stub := []string{bridgeTarget, "-claim"}
	var status *sandboxbridge.StubStatus
	boot := time.Duration(0)
	if pre := p.tmpl.Preload; pre != nil {
		boot = pre.Timeout
		if boot <= 0 {
			boot = sandboxbridge.DefaultPreloadTimeout
		}
		stub = sandboxbridge.PreloadArgs(bridgeTarget, pre.Argv, boot.String())
		status = sandboxbridge.NewStubStatus()
	}
	// The runtime's own mounts (Preload.Mounts) are there from the start, read-only.
	s.container, err = r.create(ctx, id, spec.ColdSpec(), img, lbls, withSlotMounts(s.dir), withStub(stub))
	if err != nil {
		return nil, err
	}
	in, claim := io.Pipe()
	s.claim = claim
	s.stdout, s.stderr = &switchWriter{}, &switchWriter{}
	if status != nil {
		s.stdout.set(status)
	}
	task, err := s.container.NewTask(ctx, cio.NewCreator(cio.WithStreams(in, s.stdout, s.stderr)))
	if err != nil {
		_ = claim.Close()
		return nil, fmt.Errorf("create task: %w", classify(err))
	}
	s.task = task
	s.mem, _ = cgroupmem.ForPID(int(task.Pid()))
	if s.statusC, err = task.Wait(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("wait: %w", classify(err))
	}
	// A pre-booted runtime boots before the claim: its stub always starts now.
	if r.cfg.poolStarted || status != nil {
		if err := task.Start(ctx); err != nil {
			return nil, fmt.Errorf("start: %w", classify(err))
		}
		s.started = true
	}
	if status != nil {
		// Ready only once the runtime is: the stub's status line, or its end.
		select {
		case st := <-status.Done():
			if st.Preload != bridgeapi.PreloadStatusReady {
				return nil, fmt.Errorf("%w: %s", errPreload, st.Reason)
			}
			s.attestation = st.Attestation
		case <-s.statusC:
			s.exited.Store(true)
			return nil, fmt.Errorf("%w: the stub exited before its runtime was ready", errPreload)
		case <-time.After(boot + 30*time.Second):
			return nil, fmt.Errorf("%w: no status from the stub after %v", errPreload, boot+30*time.Second)
		case <-p.ctx.Done():
			return nil, p.ctx.Err()
		}
	}
	return s, nil
}

// errPreload marks a slot whose pre-booted runtime failed before any claim.
var errPreload = errors.New("pre-booted runtime failed")

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
	spec = spec.WithDefaults()
	if !port.TemplateOf(spec).Equal(p.tmpl) {
		p.other.Add(1)
		return coldRun(ctx, p.r, spec, "no pool of the run's shape")
	}
	if err := p.r.check(spec); err != nil {
		return nil, opErr("RunOnce", spec.RunID, err)
	}
	s := p.take()
	if s == nil {
		p.cold.Add(1)
		telemetry.Or(p.r.cfg.tel).PoolClaim(ctx, "containerd", false)
		return coldRun(ctx, p.r, spec, "the pool was empty")
	}
	p.warm.Add(1)
	telemetry.Or(p.r.cfg.tel).PoolClaim(ctx, "containerd", true)
	res, err := p.run(ctx, spec, s)
	if res != nil && res.gone != "" {
		// The runtime died between its last check and the claim: nothing of the run
		// ran in the slot. Run it cold, and say so.
		p.preloadFailed.Add(1)
		return coldRun(ctx, p.r, spec, "the pre-booted runtime was gone at the claim: "+res.gone)
	}
	if res == nil {
		return nil, err
	}
	return res.RunResult, err
}

// coldRun runs spec on the runner, saying why in the result.
func coldRun(ctx context.Context, r *Runner, spec port.RunSpec, why string) (*port.RunResult, error) {
	res, err := r.RunOnce(ctx, spec)
	if res != nil {
		res.Start, res.StartNote = port.StartCold, why
	}
	return res, err
}

// slotResult is a pooled run's result, with what the pool needs to know of it.
type slotResult struct {
	*port.RunResult
	gone string // the stub's PreloadGone reason
}

// take returns a ready slot, or nil when there is none. A started stub that ended
// before its claim (killed from outside, say) is no sandbox to run in: it is dropped
// and the next one taken.
func (p *Pool) take() *slot {
	for {
		var s *slot
		select {
		case s = <-p.ready:
			p.signal()
		default:
			return nil
		}
		if !s.started {
			return s
		}
		select {
		case <-s.statusC:
			s.exited.Store(true)
			p.failed.Add(1)
			p.r.cleanup.Go(func() { p.destroy(s) })
		default:
			return s
		}
	}
}

// run runs spec in the claimed slot s.
func (p *Pool) run(ctx context.Context, spec port.RunSpec, s *slot) (*slotResult, error) {
	r := p.r
	ctx = r.ns(ctx)
	start := time.Now()
	res := &port.RunResult{ExitCode: -1, Start: port.StartWarm}
	if p.tmpl.Preload != nil {
		res.Start, res.PreloadAttestation = port.StartPreloaded, s.attestation
	}
	ph := telemetry.StartPhases(ctx, "sandbox.claim", telemetry.Runtime.String("containerd"), telemetry.PoolClaim.String("warm"))
	defer ph.End()
	fail := func(code port.ErrorCode, cause error) (*slotResult, error) {
		res.ErrorCode = code
		res.Duration = time.Since(start)
		return &slotResult{RunResult: res}, opErr("RunOnce", spec.RunID, &port.RunError{Code: code, Err: cause})
	}
	// The slot is single-use whatever happens from here; removed after the result.
	var relabel sync.WaitGroup
	defer func() {
		r.cleanup.Go(func() {
			relabel.Wait()
			p.destroy(s)
		})
	}()
	log := r.cfg.logger.With("run_id", spec.RunID, "container", s.id)
	var err error
	if s.runLease, err = holdLease(r.cfg.owner, spec.RunID); err != nil {
		return fail(port.CodeInternal, err)
	}

	// The run's identity: its labels (so Sweep by run ID finds the sandbox), set while
	// the run goes on.
	relabel.Add(1)
	go func() {
		defer relabel.Done()
		lctx, cancel := r.cleanupCtx(context.Background())
		defer cancel()
		lbls := adapterutil.ResourceLabels(r.cfg.owner, spec.RunID, port.KindSandbox, spec.Labels, time.Now())
		if _, err := s.container.SetLabels(lctx, lbls); err != nil {
			log.Warn("labelling the claimed sandbox failed", "err", err)
		}
	}()

	// Its data: workspace, mounts and LLM socket directory on the slot's mount points.
	if err := s.attachRun(spec); err != nil {
		return fail(port.CodeContainerFailed, err)
	}

	r.phase("attach")
	// Its command, through the claim channel, closed after it.
	msg, err := claimMessage(spec, s.img)
	if err != nil {
		return fail(port.CodeContainerFailed, err)
	}
	stdout := &capture.Buffer{Max: spec.OutputLimit, Live: spec.Stdout}
	stderr := &capture.Buffer{Max: spec.OutputLimit, Live: spec.Stderr}
	s.stdout.set(stdout)
	s.stderr.set(stderr)
	mem := cgroupmem.StartClaimed(s.mem, memSampleInterval)
	defer func() { res.Memory = mem.Stop() }()
	go func() {
		// A pipe write returns once the shim's FIFO has it; the stub reads it at start.
		_, werr := s.claim.Write(msg)
		_ = s.claim.CloseWithError(werr)
	}()

	runCtx, cancel := context.WithTimeout(ctx, spec.Limits.Timeout)
	defer cancel()
	r.phase("claim")
	ph.Next("sandbox.start")
	if !s.started {
		if err := s.task.Start(ctx); err != nil {
			return fail(port.CodeContainerFailed, fmt.Errorf("start: %w", classify(err)))
		}
	}
	r.phase("start")
	ph.Next("sandbox.wait")
	collect := func(until time.Time) {
		waitIO(s.task.IO(), until, log)
		res.Stdout, res.StdoutTruncated = stdout.Result()
		res.Stderr, res.StderrTruncated = stderr.Result()
	}
	select {
	case st := <-s.statusC:
		s.exited.Store(true)
		r.phase("exit")
		collect(time.Now().Add(ioGrace))
		r.phase("output")
		res.Duration = time.Since(start)
		if code, cause := slotExitResult(ctx, s, st, res, stderr, spec, log); code != "" {
			if entry, ok := sandboxbridge.MissingEntry(cause.Error()); ok && p.tmpl.Preload != nil && code == port.CodeContainerFailed {
				cause = &port.EntrypointError{Entry: entry, Reason: cause.Error()}
			}
			return fail(code, cause)
		}
		if res.ExitCode == 137 && r.removedUnderUs(ctx, s.container) {
			return fail(port.CodeInternal, fmt.Errorf("%w: the pooled sandbox was deleted while the run went on (exit %d is the removal's kill, not the agent's)", port.ErrRemoved, res.ExitCode))
		}
		if p.tmpl.Preload != nil && res.ExitCode == sandboxbridge.ExitBridgeFailed {
			if reason, ok := sandboxbridge.PreloadGoneIn(stderr.Tail()); ok {
				s.runLease.Release() // the cold run that follows holds the run's lease
				return &slotResult{RunResult: res, gone: reason}, nil
			}
		}
		return &slotResult{RunResult: res}, nil
	case <-runCtx.Done():
		return fail(port.CodeTimeout, r.timedOut(ctx, spec, s.task, s.statusC, &s.exited, mem, time.Since(start), collect, log))
	}
}

// slotExitResult classifies the exit of a pooled run: its exit code into res, and
// the failure code and cause ("" when the run completed): the exec failed, or it
// was OOM-killed.
func slotExitResult(ctx context.Context, s *slot, st client.ExitStatus, res *port.RunResult, stderr *capture.Buffer, spec port.RunSpec, log *slog.Logger) (port.ErrorCode, error) {
	code, _, err := st.Result()
	if err != nil {
		return port.CodeInternal, fmt.Errorf("exit status: %w", err)
	}
	res.ExitCode = int(code)
	var noticed bool
	res.Stderr, noticed = capture.TrimNotice(res.Stderr, stderr.Tail(), sandboxbridge.OOMNotice)
	if reason, ok := execFailed(true, res.ExitCode, stderr.Tail()); ok {
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

// attachRun puts the run's workspace, mounts and LLM socket directory on the slot's
// mount points.
func (s *slot) attachRun(spec port.RunSpec) error {
	stage := filepath.Join(s.dir, slotStage)
	if spec.WorkspaceDir != "" {
		if err := attach(spec.WorkspaceDir, filepath.Join(s.dir, slotWorkspace), stage, true); err != nil {
			return err
		}
	}
	for i, m := range spec.Mounts {
		if err := attach(m.Source, filepath.Join(s.dir, slotMount+strconv.Itoa(i)), stage, m.Writable); err != nil {
			return err
		}
	}
	if spec.LLM != nil {
		if err := attach(spec.LLM.HostDir, filepath.Join(s.dir, slotSocket), stage, false); err != nil {
			return err
		}
	}
	return nil
}

// claimMessage is the claim line that starts spec's command in a slot of img.
func claimMessage(spec port.RunSpec, img *imageInfo) ([]byte, error) {
	argv := spec.Argv
	if len(argv) == 0 {
		argv = append(append([]string(nil), img.config.Entrypoint...), img.config.Cmd...)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("no argv given and image %q has no entrypoint or cmd", spec.Image)
	}
	dir := img.config.WorkingDir
	if spec.WorkspaceDir != "" {
		dir = port.WorkspacePath
	}
	claim := sandboxbridge.NewClaim(argv, runEnv(spec, img), dir, spec.LLM != nil, spec.Limits.Timeout, time.Now())
	claim.Egress = adapterutil.EgressOn(spec)
	return claim.Encode()
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
		gone = r.deleteTask(s.task, s.id, stateOf(s.exited.Load()))
	}
	if s.container != nil {
		if err := deleteContainer(ctx, s.container, gone); err != nil {
			r.cfg.logger.Error("removing a pooled sandbox failed; a Sweep will retry", "container", s.id, "err", err)
			s.release()
			return
		}
	}
	if err := removeSlotDir(s.dir); err != nil {
		r.cfg.logger.Error("removing a pooled sandbox's directory failed; a Sweep will retry", "dir", s.dir, "err", err)
	}
	s.release()
}

// holdLease takes runID's run lease (see slot.lease); one it cannot take is
// ErrInternal.
func holdLease(owner, runID string) (*runlease.Lease, error) {
	l, err := runlease.Hold(runlease.DefaultRoot(), owner, runID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", port.ErrInternal, err)
	}
	return l, nil
}

// release gives up the slot's leases: it is gone, or a Sweep may have what is left.
func (s *slot) release() {
	s.lease.Release()
	s.runLease.Release()
}

// Close implements port.Pool: no more refills, ready sandboxes removed, used ones'
// removals waited for (until ctx ends). Runs in progress finish.
func (p *Pool) Close(ctx context.Context) error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	p.cancel()
	p.unobserve()
	p.r.poolsMu.Lock()
	delete(p.r.pools, p)
	p.r.poolsMu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return opErr("Pool.Close", "", ctx.Err())
	}
	var wg sync.WaitGroup
	for {
		select {
		case s := <-p.ready:
			wg.Add(1)
			go func() { defer wg.Done(); p.destroy(s) }()
			continue
		default:
		}
		break
	}
	wg.Wait()
	if err := p.r.cleanup.Wait(ctx); err != nil {
		return opErr("Pool.Close", "", err)
	}
	return nil
}

// poolDir is where slot directories live: one per pooled sandbox, named after it.
// poolIDPrefix starts the container id of every slot of owner's pools. The id names
// the slot's stdio FIFOs under FIFORoot, which carry no labels: the owner's tag in it
// lets a sweep or an operator attribute them (another owner's FIFOs are not ours).
func poolIDPrefix(namespace, owner string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + owner))
	return "agentsandbox-pool-" + hex.EncodeToString(sum[:4]) + "-"
}

func (r *Runner) poolDir() string {
	return filepath.Join(r.cfg.poolDir, r.cfg.namespace, r.cfg.owner)
}

// switchWriter is a pooled sandbox's stdout or stderr: nothing of the run exists when
// the task is created, so output goes to the run's buffer once claimed (the stub says
// nothing before unless it fails, and that is dropped with the slot).
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

// Write implements io.Writer.
func (s *switchWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(b), nil
	}
	return s.w.Write(b)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
