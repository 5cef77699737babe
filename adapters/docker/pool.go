package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/adapterutil"
	"github.com/agentsandbox/sandbox/internal/capture"
	"github.com/agentsandbox/sandbox/internal/cgroupmem"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runlease"
	"github.com/agentsandbox/sandbox/internal/sandboxbridge"
	"github.com/agentsandbox/sandbox/internal/slotmount"
	"github.com/agentsandbox/sandbox/port"
)

// Labels of a pooled sandbox, besides the usual ones (the same keys as the containerd
// adapter's).
const (
	// LabelPool is the key of the template a pooled sandbox was made for.
	LabelPool = port.LabelPrefix + "pool"
	// LabelSlotDir is a pooled sandbox's host directory (its mount points), which
	// Sweep unmounts and removes with the container.
	LabelSlotDir = port.LabelPrefix + "slot-dir"
)

// DefaultPoolDir holds the host directories of pooled sandboxes (see WithPoolDir).
const DefaultPoolDir = "/run/agentsandbox/pool"

// DefaultPoolRefillConcurrency is PoolOptions.RefillConcurrency's default.
const DefaultPoolRefillConcurrency = 2

// Slot directories, inside a slot's host directory: shared mount points the sandbox
// mounts rslave, so what a run attaches there at claim time appears inside.
const (
	slotWorkspace = "ws"
	slotSocket    = "sock"
	slotMount     = "m" // + index
	slotStage     = "stage"
)

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
	tmpl port.PoolTemplate
	key  string
	size int

	ready chan *slot
	sem   chan struct{}
	wake  chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	creating                                 atomic.Int32
	warm, cold, other, failed, preloadFailed atomic.Int64
	closed                                   atomic.Bool
}

var _ port.Pool = (*Pool)(nil)

// slot is one pre-created, started sandbox.
type slot struct {
	id     string // container ID
	dir    string
	img    imageConfig
	att    *client.HijackedResponse // stdin (the claim channel), stdout and stderr
	copied chan error               // the output copy ended
	stdout *switchWriter
	stderr *switchWriter
	wait   client.ContainerWaitResult
	exit   chan exitStatus    // the wait's outcome, once (buffered)
	stop   context.CancelFunc // ends the wait
	// attestation is what the stub reported once its pre-booted runtime was ready
	// (nil without Preload).
	attestation *port.Attestation
	exited      atomic.Bool
	mem         cgroupmem.Paths // its memory cgroup, sampled from the claim
	// lease is the slot's own run lease (its label's run ID) from creation, runLease
	// the claiming run's from the claim, both held until the slot is removed, so
	// another process's Sweep of the owner leaves a live pool's sandboxes alone.
	lease, runLease *runlease.Lease
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
	p, err := r.NewPool(ctx, tmpl, opts)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// NewPool is WarmPool returning the concrete type.
func (r *Runner) NewPool(_ context.Context, tmpl port.PoolTemplate, opts port.PoolOptions) (*Pool, error) {
	if !slotmount.Supported {
		return nil, opErr("WarmPool", "", fmt.Errorf("%w: warm pools need Linux mount propagation", port.ErrUnsupported))
	}
	if r.cfg.bridgePath == "" {
		return nil, opErr("WarmPool", "", fmt.Errorf("%w: warm pools need the bridge (WithBridge) as the sandboxes' stub", port.ErrUnsupported))
	}
	tmpl.Limits.Timeout = 0
	if (tmpl.Workspace || tmpl.LLM || len(tmpl.Mounts) > 0) && IsGVisor(r.Runtime()) {
		return nil, opErr("WarmPool", "", fmt.Errorf("%w: runtime %s does not see host mounts made after a sandbox starts: it can pool only templates without a workspace, mounts or LLM socket", port.ErrUnsupported, r.Runtime()))
	}
	if err := tmpl.Spec("pool-template").Validate(); err != nil {
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
	ctx, cancel := context.WithCancel(context.Background())
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
	if r.pools == nil {
		r.pools = map[*Pool]struct{}{}
	}
	r.pools[p] = struct{}{}
	r.poolsMu.Unlock()
	p.wg.Add(1)
	go p.fill()
	return p, nil
}

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
					p.r.cfg.logger.Warn("creating a pooled sandbox failed", "pool", p.key, logattr.Err, err)
					select { // a broken template must not spin the machine
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

// newSlot creates and starts one sandbox of the template. It runs to the end even
// when the pool closes meanwhile (bounded by the cleanup timeout), and leaves nothing
// behind when it fails.
func (p *Pool) newSlot() (_ *slot, err error) {
	r := p.r
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), r.cfg.cleanupTimeout)
	defer cancel()
	name := poolNamePrefix + randHex(6)
	s := &slot{dir: filepath.Join(r.poolDir(), name)}
	defer func() {
		if err != nil {
			p.destroy(s) // the slot as far as it got (a named result would be nil here)
		}
	}()
	ins, err := r.cfg.api.ImageInspect(ctx, p.tmpl.Image)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", p.tmpl.Image, classify(err))
	}
	if c := ins.Config; c != nil {
		s.img = imageConfig{argv: append(append([]string(nil), c.Entrypoint...), c.Cmd...), env: c.Env, dir: c.WorkingDir}
	}
	spec := p.tmpl.Spec("pool-" + name[len(poolNamePrefix):])
	if s.lease, err = holdLease(r.cfg.owner, spec.RunID); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("slot directory: %w", err)
	}
	shared := func(sub string) (string, error) {
		d := filepath.Join(s.dir, sub)
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
		return d, slotmount.MakeShared(d)
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
	cfg, hc := sandboxConfig(spec.ColdSpec(), stub, lbls, r.cfg.bridgePath)
	hc.Runtime = r.cfg.runtime
	for i, m := range hc.Mounts {
		if m.Type == mount.TypeBind && strings.HasPrefix(m.Source, s.dir+"/") {
			hc.Mounts[i].BindOptions = &mount.BindOptions{Propagation: mount.PropagationRSlave}
		}
	}
	// The stub's stdin is the claim channel: kept open by our attach until the claim,
	// closed after it (StdinOnce). A host that dies closes it too, and the stub exits.
	cfg.OpenStdin, cfg.StdinOnce, cfg.AttachStdin = true, true, true
	created, err := r.cfg.api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	if err != nil {
		return nil, fmt.Errorf("create: %w", classify(err))
	}
	s.id = created.ID
	att, err := r.cfg.api.ContainerAttach(ctx, s.id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("attach: %w", classify(err))
	}
	s.att = &att.HijackedResponse
	s.stdout, s.stderr = &switchWriter{}, &switchWriter{}
	if status != nil {
		s.stdout.set(status)
	}
	s.copied = make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(s.stdout, s.stderr, s.att.Reader)
		s.copied <- err
	}()
	wctx, stop := context.WithCancel(context.WithoutCancel(p.ctx))
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
		return nil, fmt.Errorf("start: %w", classify(err))
	}
	s.mem, _ = cgroupmem.ForPID(r.pid(ctx, s.id))
	if status != nil {
		// Ready only once the runtime is: the stub's status line, or its end.
		select {
		case st := <-status.Done():
			if st.Preload != bridgeapi.PreloadStatusReady {
				return nil, fmt.Errorf("%w: %s", errPreload, st.Reason)
			}
			s.attestation = st.Attestation
		case <-s.exit:
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

// RunOnce implements port.SandboxRunner: a run of the pool's shape takes a ready
// sandbox, any other run (or one that finds the pool empty) runs cold on the runner.
func (p *Pool) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	spec = spec.WithDefaults()
	if !port.TemplateOf(spec).Equal(p.tmpl) || len(spec.Labels) > 0 || spec.Network.Internal != "" {
		p.other.Add(1)
		return coldRun(ctx, p.r, spec, "no pool of the run's shape")
	}
	if err := p.r.check(ctx, spec); err != nil {
		return nil, opErr("RunOnce", spec.RunID, err)
	}
	s := p.take()
	if s == nil {
		p.cold.Add(1)
		return coldRun(ctx, p.r, spec, "the pool was empty")
	}
	p.warm.Add(1)
	res, err := p.run(ctx, spec, s)
	if reason, gone := res.preloadGone(); gone {
		// The runtime died between its last check and the claim: nothing of the run
		// ran in the slot. Run it cold, and say so.
		p.preloadFailed.Add(1)
		return coldRun(ctx, p.r, spec, "the pre-booted runtime was gone at the claim: "+reason)
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

func (r slotResult) preloadGone() (string, bool) { return r.gone, r.gone != "" }

// take returns a ready slot, or nil when there is none. A stub that ended before its
// claim (killed from outside, say) is dropped and the next one taken.
func (p *Pool) take() *slot {
	for {
		var s *slot
		select {
		case s = <-p.ready:
			p.signal()
		default:
			return nil
		}
		select {
		case <-s.exit:
		default:
			return s
		}
		s.exited.Store(true)
		p.failed.Add(1)
		p.r.cleanup.Go(func() { p.destroy(s) })
	}
}

// run runs spec in the claimed slot s.
func (p *Pool) run(ctx context.Context, spec port.RunSpec, s *slot) (slotResult, error) {
	r := p.r
	start := time.Now()
	res := &port.RunResult{ExitCode: -1, Start: port.StartWarm}
	if p.tmpl.Preload != nil {
		res.Start, res.PreloadAttestation = port.StartPreloaded, s.attestation
	}
	fail := func(code port.ErrorCode, cause error) (slotResult, error) {
		res.ErrorCode = code
		res.Duration = time.Since(start)
		return slotResult{RunResult: res}, opErr("RunOnce", spec.RunID, &port.RunError{Code: code, Err: cause})
	}
	var rename sync.WaitGroup
	defer func() {
		r.cleanup.Go(func() {
			rename.Wait()
			p.destroy(s)
		})
	}()
	log := r.cfg.logger.With(logattr.RunID, spec.RunID, logattr.Container, short(s.id))
	var err error
	if s.runLease, err = holdLease(r.cfg.owner, spec.RunID); err != nil {
		return fail(port.CodeInternal, err)
	}

	// The run's identity: the container's name (so Sweep by run ID finds it), set
	// while the run goes on.
	rename.Add(1)
	go func() {
		defer rename.Done()
		rctx, cancel := context.WithTimeout(context.Background(), r.cfg.cleanupTimeout)
		defer cancel()
		if _, err := r.cfg.api.ContainerRename(rctx, s.id, client.ContainerRenameOptions{NewName: containerName(spec.RunID)}); err != nil {
			log.Warn("naming the claimed sandbox after its run failed", logattr.Err, err)
		}
	}()

	stage := filepath.Join(s.dir, slotStage)
	if spec.WorkspaceDir != "" {
		if err := slotmount.Attach(spec.WorkspaceDir, filepath.Join(s.dir, slotWorkspace), stage, true); err != nil {
			return fail(port.CodeContainerFailed, err)
		}
	}
	for i, m := range spec.Mounts {
		if err := slotmount.Attach(m.Source, filepath.Join(s.dir, slotMount+strconv.Itoa(i)), stage, m.Writable); err != nil {
			return fail(port.CodeContainerFailed, err)
		}
	}
	if spec.LLM != nil {
		if err := slotmount.Attach(spec.LLM.HostDir, filepath.Join(s.dir, slotSocket), stage, false); err != nil {
			return fail(port.CodeContainerFailed, err)
		}
	}

	argv := spec.Argv
	if len(argv) == 0 {
		argv = s.img.argv
	}
	if len(argv) == 0 {
		return fail(port.CodeContainerFailed, fmt.Errorf("no argv given and image %q has no entrypoint or cmd", spec.Image))
	}
	dir := s.img.dir
	if spec.WorkspaceDir != "" {
		dir = port.WorkspacePath
	}
	claim := sandboxbridge.NewClaim(argv, claimEnv(spec, s.img.env), dir, spec.LLM != nil, spec.Limits.Timeout, time.Now())
	claim.Egress = adapterutil.EgressOn(spec)
	msg, err := claim.Encode()
	if err != nil {
		return fail(port.CodeContainerFailed, err)
	}
	stdout := &capture.Buffer{Max: spec.OutputLimit, Live: spec.Stdout}
	stderr := &capture.Buffer{Max: spec.OutputLimit, Live: spec.Stderr}
	s.stdout.set(stdout)
	s.stderr.set(stderr)
	mem := cgroupmem.StartClaimed(s.mem, memSampleInterval)
	defer func() { res.Memory = cgroupmem.Ended(mem.Stop(), res.ErrorCode == port.CodeOOMKilled) }()
	if _, err := s.att.Conn.Write(msg); err != nil {
		return fail(port.CodeContainerFailed, fmt.Errorf("claim: %w", err))
	}
	if err := s.att.CloseWrite(); err != nil {
		return fail(port.CodeContainerFailed, fmt.Errorf("claim: %w", err))
	}

	collect := func() {
		select {
		case <-s.copied:
		case <-time.After(5 * time.Second):
			log.Warn("output stream did not end after exit")
		}
		res.Stdout, res.StdoutTruncated = stdout.Result()
		res.Stderr, res.StderrTruncated = stderr.Result()
	}
	runCtx, cancel := context.WithTimeout(ctx, spec.Limits.Timeout)
	defer cancel()
	select {
	case st := <-s.exit:
		s.exited.Store(true)
		collect()
		if st.err != nil {
			if r.removedUnderUs(ctx, s.id) {
				return fail(port.CodeInternal, fmt.Errorf("%w: the pooled sandbox was removed while the run went on: %w", port.ErrRemoved, classify(st.err)))
			}
			return fail(port.CodeInternal, fmt.Errorf("wait: %w", classify(st.err)))
		}
		w := st.res
		res.Duration = time.Since(start)
		res.ExitCode = int(w.StatusCode)
		if w.Error != nil && w.Error.Message != "" {
			return fail(port.CodeInternal, errors.New(w.Error.Message))
		}
		if p.tmpl.Preload != nil && res.ExitCode == sandboxbridge.ExitBridgeFailed {
			if reason, ok := sandboxbridge.PreloadGoneIn(stderr.Tail()); ok {
				s.runLease.Release() // the cold run that follows holds the run's lease
				return slotResult{RunResult: res, gone: reason}, nil
			}
		}
		if reason, ok := execFailed(true, res.ExitCode, stderr.Tail()); ok {
			if entry, ok := sandboxbridge.MissingEntry(reason); ok && p.tmpl.Preload != nil {
				return fail(port.CodeContainerFailed, &port.EntrypointError{Entry: entry, Reason: reason})
			}
			return fail(port.CodeContainerFailed, errors.New(reason))
		}
		if w.StatusCode != 137 {
			return slotResult{RunResult: res}, nil
		}
		if r.removedUnderUs(ctx, s.id) {
			return fail(port.CodeInternal, fmt.Errorf("%w: the pooled sandbox was removed while the run went on (exit %d is the removal's kill, not the agent's)", port.ErrRemoved, w.StatusCode))
		}
		var oom bool
		res.Stderr, oom = capture.TrimNotice(res.Stderr, stderr.Tail(), sandboxbridge.OOMNotice)
		if !oom && !r.bridgeSeesOOM() {
			if oom, err = r.oomKilled(ctx, s.id); err != nil {
				return fail(port.CodeInternal, err)
			}
		}
		if oom {
			return fail(port.CodeOOMKilled, fmt.Errorf("memory limit %d bytes reached", spec.Limits.MemoryBytes))
		}
		return slotResult{RunResult: res}, nil
	case <-runCtx.Done():
		var cause error
		if ctx.Err() != nil {
			cause = context.Cause(ctx)
		} else {
			cause = fmt.Errorf("run exceeded its %v limit", spec.Limits.Timeout)
		}
		mem.Sample()
		cause = cgroupmem.Hint(cause, mem.Stop(), time.Since(start))
		r.killSlot(ctx, s, log)
		collect()
		return fail(port.CodeTimeout, cause)
	}
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
		s.exited.Store(true)
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
			s.lease.Release()
			s.runLease.Release()
			return
		}
	}
	p.release(s)
	if err := slotmount.RemoveDir(s.dir); err != nil {
		r.cfg.logger.Error("removing a pooled sandbox's directory failed; a Sweep will retry", "dir", s.dir, logattr.Err, err)
	}
	s.lease.Release() // gone, or a Sweep may have what is left
	s.runLease.Release()
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

// holdLease takes runID's run lease (see slot.lease); one it cannot take is
// ErrInternal.
func holdLease(owner, runID string) (*runlease.Lease, error) {
	l, err := runlease.Hold(runlease.DefaultRoot(), owner, runID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", port.ErrInternal, err)
	}
	return l, nil
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
func (p *Pool) Close(ctx context.Context) error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	p.cancel()
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
func (r *Runner) poolDir() string {
	return r.cfg.poolRoot()
}

// switchWriter is a pooled sandbox's stdout or stderr: nothing of the run exists when
// the container starts, so output goes to the run's buffer once claimed (the stub says
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

// pooledRun reports whether a container named name is a pooled sandbox claimed by
// runID (see containerName).
func pooledRun(name, runID string) bool {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(name, "/"), "agentsandbox-")
	if !ok || len(rest) < 10 || rest[len(rest)-9] != '-' {
		return false
	}
	return rest[:len(rest)-9] == runID
}
