package warmpool

import (
	"log/slog"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/capture"
	"github.com/agentsandbox/sandbox/internal/runner/cgroupmem"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/port"
)

// Claim is a run in a claimed slot: its result as it grows, its output, and what
// watches its end.
type Claim struct {
	Spec  port.RunSpec    // the run as the host asked for it
	Res   *port.RunResult // the run's result, filled as the run goes
	Start time.Time       // when the slot was claimed: the run's start
	Run   *runner.Run     // the run's failure path (runner.Run.Fail)
	Log   *slog.Logger    // set by the adapter's Steps.Run
	// Stdout and Stderr hold the run's output; Watch finds the stub's exit records
	// in it (set by Begin).
	Stdout, Stderr *capture.Buffer
	Watch          *ExitWatch
	Mem            *cgroupmem.Sampler // set by the adapter once the claim is sent
	slot           *Slot
	preload        bool
	owner          string
	named          sync.WaitGroup // the naming of the sandbox after the run
}

// claim starts a run of spec in the claimed slot s: its result says how it started
// (warm, or pre-booted with the stub's attestation).
func (p *Pool[S, E]) claim(spec port.RunSpec, s *Slot) *Claim {
	start := time.Now()
	res := &port.RunResult{ExitCode: -1, Start: port.StartWarm}
	preload := p.tmpl.Preload != nil
	if preload {
		res.Start, res.PreloadAttestation = port.StartPreloaded, s.Attestation
	}
	return &Claim{
		Spec: spec, Res: res, Start: start, slot: s, preload: preload, owner: p.owner,
		Run: &runner.Run{Op: p.engine + ".RunOnce", Spec: spec, Start: start, Result: res},
	}
}

// Begin holds the run's lease, names the sandbox after the run beside it (name: the
// slot's removal waits for it), attaches the run's data on the slot's mount points,
// and returns the claim line for the image's argv, env and working directory, with
// the slot's output going to the claim's buffers from here. A failure is the run's
// (a non-nil result).
func (c *Claim) Begin(name func(), argv, env []string, dir string) ([]byte, *Result, error) {
	var err error
	if c.slot.RunLease, err = HoldLease(c.owner, c.Spec.RunID, runlease.KindRun); err != nil {
		res, err := c.Fail(port.CodeInternal, err)
		return nil, res, err
	}

	// The run's identity, set while the run goes on, so Sweep by run ID finds the
	// sandbox.
	c.named.Add(1)
	go func() {
		defer c.named.Done()
		name()
	}()

	// Its data: workspace, mounts and LLM socket directory on the slot's mount points.
	if err := AttachRun(c.slot.Dir, c.Spec); err != nil {
		res, err := c.Fail(port.CodeContainerFailed, err)
		return nil, res, err
	}
	// The claim carries a fresh exit nonce: the stub ends its streams with records
	// keyed by it, the run's end without waiting for the runtime's exit handling.
	msg, nonce, err := ClaimMessage(c.Spec, argv, env, dir)
	if err != nil {
		res, err := c.Fail(port.CodeContainerFailed, err)
		return nil, res, err
	}
	c.Stdout = &capture.Buffer{Max: c.Spec.OutputLimit, Live: c.Spec.Stdout}
	c.Stderr = &capture.Buffer{Max: c.Spec.OutputLimit, Live: c.Spec.Stderr}
	c.Watch = NewExitWatch(nonce, c.Stdout, c.Stderr)
	c.slot.Stdout.Set(c.Watch.Stdout())
	c.slot.Stderr.Set(c.Watch.Stderr())
	return msg, nil, nil
}

// Fail ends the claimed run with code (runner.Run.Fail).
func (c *Claim) Fail(code port.ErrorCode, cause error) (*Result, error) {
	return Ran(c.Run.Fail(code, cause))
}

// Output puts what the buffers hold in the result.
func (c *Claim) Output() {
	c.Res.Stdout, c.Res.StdoutTruncated = c.Stdout.Result()
	c.Res.Stderr, c.Res.StderrTruncated = c.Stderr.Result()
}

// Collected is Output once the sandbox's streams ended: with what the watch held
// back as a possible record's start.
func (c *Claim) Collected() {
	c.Watch.Flush()
	c.Output()
}

// PreloadGone reports a run whose bridge failed because the pre-booted runtime had
// died before the claim (the stub's notice): nothing of the run ran, and the cold
// run that follows holds the run's lease.
func (c *Claim) PreloadGone() (*Result, bool) {
	if !c.preload || c.Res.ExitCode != bridgeapi.ExitBridgeFailed {
		return nil, false
	}
	reason, ok := bridgeapi.PreloadGoneIn(c.Stderr.Tail())
	if !ok {
		return nil, false
	}
	c.slot.RunLease.Release()
	return &Result{RunResult: c.Res, Gone: reason}, true
}

// MissingEntry turns a pre-booted run's failure to start its command into the
// runtime's port.EntrypointError, else returns cause.
func (c *Claim) MissingEntry(code port.ErrorCode, cause error) error {
	if entry, ok := bridgeapi.MissingEntry(cause.Error()); ok && c.preload && code == port.CodeContainerFailed {
		return &port.EntrypointError{Entry: entry, Reason: cause.Error()}
	}
	return cause
}

// Port is a pool as port.Pooler returns it: a nil interface on error.
func Port[P port.Pool](p P, err error) (port.Pool, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}
