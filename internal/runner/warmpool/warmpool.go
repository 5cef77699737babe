// Package warmpool is what the Docker and containerd warm pools share (see
// port.Pooler and docs/warm-pools-and-runtimes.md): the pool itself (Pool: the
// request's admission, a slot's making around the runtime's own create, the routing
// of a run to a ready sandbox or the cold path, Close), the filler that keeps a pool
// at its size (Keeper) and its counters, the slot directories a run's data is
// attached on at claim time, the stub's pre-boot, the claimed run's shared half
// (Slot, Claim) and the claim line. What differs between the engines (creating,
// starting, waiting on, claiming and removing a sandbox, and classifying its exit)
// stays in each adapter, as the Steps it gives the Pool.
package warmpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/slotmount"
	"github.com/agentsandbox/sandbox/port"
)

// ErrPreload marks a slot whose pre-booted runtime failed before any claim.
var ErrPreload = errors.New("pre-booted runtime failed")

// Config is what a Keeper needs from its adapter.
type Config[S any] struct {
	Key         string // the template's key, for logs
	Size        int    // sandboxes kept ready
	Concurrency int    // creations at once (PoolOptions.RefillConcurrency)
	// BetweenRuns holds creations while a taken sandbox's run is in progress
	// (PoolOptions.RefillBetweenRuns).
	BetweenRuns bool
	// New creates one ready sandbox. It may outlive the pool's context (Keeper.Ctx)
	// to finish or undo what it started.
	New func() (S, error)
	// Destroy removes a sandbox whatever its state; Discard does it in the
	// background (the runner's cleanup queue).
	Destroy, Discard func(S)
	Logger           *slog.Logger
}

// Keeper keeps Size sandboxes ready until Stop, and counts what the pool did.
type Keeper[S any] struct {
	cfg Config[S]

	// Ready holds the sandboxes ready for a claim.
	Ready chan S
	sem   chan struct{} // creations in flight
	wake  chan struct{}

	ctx    context.Context // the pool's life: cancelled by Stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // the filler and the creations

	creating atomic.Int32
	running  atomic.Int32 // taken sandboxes whose run has not ended (Take, Done)
	// Warm, Cold, Other, Failed and PreloadFailed are port.PoolStats' counters.
	Warm, Cold, Other, Failed, PreloadFailed atomic.Int64
	closed                                   atomic.Bool
}

// New returns a keeper whose life is a child of base (which carries what the
// adapter's calls need, a containerd namespace say); Start starts its filler.
func New[S any](base context.Context, cfg Config[S]) *Keeper[S] {
	ctx, cancel := context.WithCancel(base)
	return &Keeper[S]{
		cfg:   cfg,
		Ready: make(chan S, cfg.Size), sem: make(chan struct{}, cfg.Concurrency), wake: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel,
	}
}

// Ctx is the pool's life, cancelled by Stop.
func (k *Keeper[S]) Ctx() context.Context { return k.ctx }

// Start starts filling the pool.
func (k *Keeper[S]) Start() {
	k.wg.Add(1)
	go k.fill()
}

// Stats returns the pool's counters (port.Pool's Stats).
func (k *Keeper[S]) Stats() port.PoolStats {
	return port.PoolStats{
		Ready: len(k.Ready), Creating: int(k.creating.Load()),
		Warm: k.Warm.Load(), Cold: k.Cold.Load(), Other: k.Other.Load(), Failed: k.Failed.Load(),
		PreloadFailed: k.PreloadFailed.Load(),
	}
}

// fill keeps the pool at its size, creating at most Concurrency sandboxes at once,
// until Stop.
func (k *Keeper[S]) fill() {
	defer k.wg.Done()
	for {
		for k.mayCreate() {
			select {
			case k.sem <- struct{}{}:
			case <-k.ctx.Done():
				return
			}
			k.creating.Add(1)
			k.wg.Add(1)
			go k.create()
		}
		select {
		case <-k.wake:
		case <-k.ctx.Done():
			return
		}
	}
}

// mayCreate reports whether the pool is short and may create a sandbox now.
func (k *Keeper[S]) mayCreate() bool {
	if k.cfg.BetweenRuns && k.running.Load() > 0 {
		return false
	}
	return len(k.Ready)+int(k.creating.Load()) < k.cfg.Size
}

// create makes one sandbox and queues it.
func (k *Keeper[S]) create() {
	defer k.wg.Done()
	s, err := k.cfg.New()
	if err != nil {
		k.Failed.Add(1)
		if errors.Is(err, ErrPreload) {
			k.PreloadFailed.Add(1)
		}
		k.cfg.Logger.Warn("creating a pooled sandbox failed", "pool", k.cfg.Key, logattr.Err, err)
		select { // a broken template must not spin the machine
		case <-time.After(time.Second):
		case <-k.ctx.Done():
		}
	} else {
		select {
		case k.Ready <- s:
		default: // cannot happen while the counts hold; never leak it
			k.cfg.Discard(s)
		}
	}
	k.creating.Add(-1)
	<-k.sem
	k.signal()
}

func (k *Keeper[S]) signal() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// Take returns a ready sandbox, or false when there is none. One that ended before
// its claim (ended reports it: killed from outside, say) is no sandbox to run in: it
// is counted failed, discarded, and the next one taken. The caller calls Done once
// the run in a sandbox it was given has ended.
func (k *Keeper[S]) Take(ended func(S) bool) (S, bool) {
	for {
		// Counted running before it leaves Ready: a filler that refills between runs
		// must never see the pool short with no run in progress.
		k.running.Add(1)
		var s S
		select {
		case s = <-k.Ready:
		default:
			k.running.Add(-1)
			k.signal()
			return s, false
		}
		k.signal()
		if !ended(s) {
			return s, true
		}
		k.running.Add(-1)
		k.Failed.Add(1)
		k.cfg.Discard(s)
	}
}

// EndedBeforeClaim counts a sandbox Take found ended before its claim (Take counts it
// in Failed): with a pre-booted runtime (preload) whose stub exited with code because
// the runtime died (bridgeapi.ExitBridgeFailed: the stub's own end is a kill), also in
// PreloadFailed.
func (k *Keeper[S]) EndedBeforeClaim(preload bool, code int) {
	if preload && code == bridgeapi.ExitBridgeFailed {
		k.PreloadFailed.Add(1)
	}
}

// Done says the run in a sandbox Take gave has ended (a pool refilling between
// runs may refill now).
func (k *Keeper[S]) Done() {
	k.running.Add(-1)
	k.signal()
}

// Stop ends the refills; it reports false when the pool was already stopped.
func (k *Keeper[S]) Stop() bool {
	if !k.closed.CompareAndSwap(false, true) {
		return false
	}
	k.cancel()
	return true
}

// Drain waits (until ctx ends) for the filler and the creations in flight, then
// removes the ready sandboxes.
func (k *Keeper[S]) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() { k.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for {
		select {
		case s := <-k.Ready:
			wg.Add(1)
			go func() { defer wg.Done(); k.cfg.Destroy(s) }()
			continue
		default:
		}
		break
	}
	wg.Wait()
	return nil
}

// Cold runs spec through run (the runner's cold path), saying why in the result.
func Cold(ctx context.Context, run func(context.Context, port.RunSpec) (*port.RunResult, error), spec port.RunSpec, why string) (*port.RunResult, error) {
	res, err := run(ctx, spec)
	if res != nil {
		res.Start, res.StartNote = port.StartCold, why
	}
	return res, err
}

// Slot directories, inside a slot's host directory. Each is a shared mount point the
// sandbox mounts rslave, so what a run attaches there at claim time appears inside.
const (
	slotWorkspace = "ws"
	slotSocket    = "sock"
	slotMount     = "m" // + index
	slotStage     = "stage"
)

// MakeSlotDirs creates dir and, in it, one shared mount point per directory spec
// (the template's spec) will have at claim time: workspace, mounts, LLM socket
// directory. spec is rewritten to mount those points.
func MakeSlotDirs(dir string, spec *port.RunSpec) (err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("slot directory: %w", err)
	}
	shared := func(sub string) (string, error) {
		d := filepath.Join(dir, sub)
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
		return d, slotmount.MakeShared(d)
	}
	if spec.WorkspaceDir != "" {
		if spec.WorkspaceDir, err = shared(slotWorkspace); err != nil {
			return err
		}
	}
	for i := range spec.Mounts {
		if spec.Mounts[i].Source, err = shared(slotMount + strconv.Itoa(i)); err != nil {
			return err
		}
	}
	if spec.LLM != nil {
		if spec.LLM.HostDir, err = shared(slotSocket); err != nil {
			return err
		}
	}
	return nil
}

// AttachRun puts the run's workspace, mounts and LLM socket directory on the mount
// points of the slot whose host directory is dir.
func AttachRun(dir string, spec port.RunSpec) error {
	stage := filepath.Join(dir, slotStage)
	if spec.WorkspaceDir != "" {
		if err := slotmount.Attach(spec.WorkspaceDir, filepath.Join(dir, slotWorkspace), stage, true); err != nil {
			return err
		}
	}
	for i, m := range spec.Mounts {
		if err := slotmount.Attach(m.Source, filepath.Join(dir, slotMount+strconv.Itoa(i)), stage, m.Writable); err != nil {
			return err
		}
	}
	if spec.LLM != nil {
		if err := slotmount.Attach(spec.LLM.HostDir, filepath.Join(dir, slotSocket), stage, false); err != nil {
			return err
		}
	}
	return nil
}

// Stub is a slot's entrypoint: the bridge waiting for its claim, after booting the
// template's runtime when it has one.
type Stub struct {
	Argv   []string
	Status *StubStatus   // the pre-boot's status line (nil without Preload)
	Boot   time.Duration // the pre-boot's timeout
}

// NewStub is the stub of a template with pre (nil: none), the bridge at target.
func NewStub(target string, pre *port.Preload) Stub {
	if pre == nil {
		return Stub{Argv: []string{target, "-" + bridgeapi.FlagClaim}}
	}
	boot := pre.Timeout
	if boot <= 0 {
		boot = bridgeapi.DefaultPreloadTimeout
	}
	return Stub{Argv: bridgeapi.PreloadArgs(target, pre.Argv, boot.String()), Status: NewStubStatus(), Boot: boot}
}

// AwaitReady waits until the stub's pre-booted runtime is ready (its status line)
// and returns its attestation; exit is the stub's end, and exited reports that the
// stub ended first. Failures wrap ErrPreload, but for ctx's end.
func AwaitReady[E any](ctx context.Context, st Stub, exit <-chan E) (att *port.Attestation, exited bool, err error) {
	select {
	case s := <-st.Status.Done():
		if s.Preload != bridgeapi.PreloadStatusReady {
			return nil, false, fmt.Errorf("%w: %s", ErrPreload, s.Reason)
		}
		return s.Attestation, false, nil
	case <-exit:
		return nil, true, fmt.Errorf("%w: the stub exited before its runtime was ready", ErrPreload)
	case <-time.After(st.Boot + 30*time.Second):
		return nil, false, fmt.Errorf("%w: no status from the stub after %v", ErrPreload, st.Boot+30*time.Second)
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// ClaimMessage is the claim line that starts spec's command in a slot of an image
// with the entrypoint and cmd imageArgv and working directory imageDir; env is the
// run's environment.
//
// The claim carries a fresh exit nonce, returned with it: the stub ends its output
// streams with exit records keyed by it (see ExitWatch); and the run's attestation
// key (port.LLMSocket.AttestKey), which only the stub holds.
func ClaimMessage(spec port.RunSpec, imageArgv, env []string, imageDir string) (msg []byte, nonce string, err error) {
	argv := spec.Argv
	if len(argv) == 0 {
		argv = imageArgv
	}
	if len(argv) == 0 {
		return nil, "", fmt.Errorf("no argv given and image %q has no entrypoint or cmd", spec.Image)
	}
	dir := imageDir
	if spec.WorkspaceDir != "" {
		dir = port.WorkspacePath
	}
	claim := bridgeapi.NewClaim(argv, env, dir, spec.LLM != nil, spec.Limits.Timeout, time.Now())
	claim.Egress = runner.EgressOn(spec)
	claim.ExitNonce = bridgeapi.NewExitNonce()
	if spec.LLM != nil {
		// The stub alone gets the key: the pre-booted runtime saw the socket
		// directory before the claim, but never sees the claim.
		claim.AttestKey = spec.LLM.AttestKey
	}
	msg, err = claim.Encode()
	return msg, claim.ExitNonce, err
}

// SwitchWriter is a pooled sandbox's stdout or stderr: nothing of the run exists when
// the sandbox is created, so output goes to the run's buffer once claimed (the stub
// says nothing before unless it fails, and that is dropped with the slot).
type SwitchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Set sends what follows to w.
func (s *SwitchWriter) Set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

// Write implements io.Writer.
func (s *SwitchWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(b), nil
	}
	return s.w.Write(b)
}

// CheckOptions validates opts and fills RefillConcurrency's default (def).
func CheckOptions(opts port.PoolOptions, def int) (port.PoolOptions, error) {
	if opts.Size < 1 {
		return opts, port.Invalidf("pool size %d is less than 1", opts.Size)
	}
	if opts.RefillConcurrency < 0 {
		return opts, port.Invalidf("refill concurrency %d is negative", opts.RefillConcurrency)
	}
	if opts.RefillConcurrency == 0 {
		opts.RefillConcurrency = def
	}
	return opts, nil
}

// Open is a runner's open pools, closed with the runner. The zero value is ready.
type Open[P comparable] struct {
	mu     sync.Mutex
	pools  map[P]struct{}
	closed bool
}

// Add records p; it reports false once the runner is closed.
func (o *Open[P]) Add(p P) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	if o.pools == nil {
		o.pools = map[P]struct{}{}
	}
	o.pools[p] = struct{}{}
	return true
}

// Remove forgets p (closed).
func (o *Open[P]) Remove(p P) {
	o.mu.Lock()
	delete(o.pools, p)
	o.mu.Unlock()
}

// Close marks the runner closed and returns the pools still open, for it to close.
func (o *Open[P]) Close() []P {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	pools := make([]P, 0, len(o.pools))
	for p := range o.pools {
		pools = append(pools, p)
	}
	return pools
}
