package sandboxbridge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// ErrPreloadFailed reports a preloaded runtime that cannot serve a claim: it exited,
// hung, wrote to stdout before the claim, or broke the protocol.
var ErrPreloadFailed = errors.New("bridge: preload failed")

// claimAnswerTimeout bounds the runtime's answer to a claim (it only checks the
// entrypoint before answering).
const claimAnswerTimeout = 30 * time.Second

// Preloaded is an agent runtime started before any run (bridgeapi's preload
// protocol): Run hands it the run (Config.Preloaded) instead of starting Argv.
type Preloaded struct {
	cmd *exec.Cmd
	ctl *os.File
	rd  *bufio.Reader
	log *slog.Logger

	mu      sync.Mutex
	claimed bool
	out     io.Writer // stdout and stderr after the claim
	errOut  io.Writer
	tail    []byte // the last stderr bytes before the claim, for a failure's reason

	failed   chan struct{} // closed on the first failure before the claim
	failOnce sync.Once
	reason   string
	copies   sync.WaitGroup
	answer   chan answer // the runtime's line after ready
}

type answer struct {
	a   bridgeapi.PreloadAnswer
	err error
}

// StartPreload starts argv as a preloaded runtime with the bridge's environment (plus
// bridgeapi.PreloadFDEnv), in "/", and waits until it is ready, fails, or timeout
// passes. A runtime that did not become ready is killed; the error wraps
// ErrPreloadFailed and says why.
func StartPreload(ctx context.Context, argv []string, timeout time.Duration, log *slog.Logger) (*Preloaded, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%w: no preload command", ErrInvalidConfig)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if timeout <= 0 {
		timeout = bridgeapi.DefaultPreloadTimeout
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: control channel: %v", ErrPreloadFailed, err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "preload-ctl"), os.NewFile(uintptr(fds[1]), "preload-ctl-child")
	outR, outW, err := os.Pipe()
	if err != nil {
		theirs.Close()
		ours.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		theirs.Close()
		ours.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		for _, f := range []*os.File{theirs, ours, outR, outW, errR, errW} {
			f.Close()
		}
		return nil, err
	}
	defer null.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), bridgeapi.PreloadFDEnv+"="+strconv.Itoa(bridgeapi.PreloadFD))
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, outW, errW
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	p := &Preloaded{cmd: cmd, ctl: ours, rd: bufio.NewReaderSize(ours, bridgeapi.MaxPreloadLine), log: log, failed: make(chan struct{}), answer: make(chan answer, 1)}
	if err := cmd.Start(); err != nil {
		theirs.Close()
		ours.Close()
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		_, err = execFailure(argv[0], err)
		return nil, fmt.Errorf("%w: %v", ErrPreloadFailed, err)
	}
	// Only the runtime holds its ends now: its exit is an EOF on each.
	theirs.Close()
	outW.Close()
	errW.Close()
	p.copies.Add(2)
	go p.copy(outR, true)
	go p.copy(errR, false)

	ready := make(chan error, 1)
	go func() { ready <- p.readReady() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-ready:
		if err != nil {
			p.fail(err.Error())
		}
	case <-p.failed:
	case <-t.C:
		p.fail(fmt.Sprintf("not ready after %v", timeout))
	case <-ctx.Done():
		p.fail(ctx.Err().Error())
	}
	select {
	case <-p.failed:
		p.Kill()
		return nil, fmt.Errorf("%w: %s", ErrPreloadFailed, p.reason)
	default:
	}
	go p.readAnswer()
	return p, nil
}

// readReady reads the runtime's first control line: nil when it says it is ready
// and speaks a protocol the bridge knows, else why not.
func (p *Preloaded) readReady() error {
	var r bridgeapi.PreloadReady
	err := bridgeapi.ReadLine(p.rd, &r)
	switch {
	case errors.Is(err, io.EOF):
		err = errors.New("the runtime exited (or closed its control channel) before it was ready")
	case err == nil && !r.Ready:
		err = errors.New(`the runtime's first line was not {"ready":true}`)
	case err == nil && r.Protocol > bridgeapi.PreloadProtocol:
		err = fmt.Errorf("the runtime speaks protocol %d, the bridge %d", r.Protocol, bridgeapi.PreloadProtocol)
	}
	return err
}

// readAnswer is the one reader of the control channel after ready: a line or EOF
// before the claim means the runtime broke the protocol or is gone; after it, the
// line is the claim's answer.
func (p *Preloaded) readAnswer() {
	var a bridgeapi.PreloadAnswer
	err := bridgeapi.ReadLine(p.rd, &a)
	p.mu.Lock()
	claimed := p.claimed
	p.mu.Unlock()
	if !claimed {
		if err != nil {
			p.fail("the runtime exited (or closed its control channel) while waiting for the claim")
		} else {
			p.fail("the runtime wrote on its control channel before the claim")
		}
	}
	p.answer <- answer{a, err}
}

// copy forwards one of the runtime's output pipes: before the claim stdout must stay
// silent (a byte fails the slot) and stderr is kept as a short tail; after it both go
// to the run's streams.
func (p *Preloaded) copy(r *os.File, stdout bool) {
	defer p.copies.Done()
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.mu.Lock()
			switch {
			case p.claimed && stdout:
				_, _ = p.out.Write(buf[:n])
			case p.claimed:
				_, _ = p.errOut.Write(buf[:n])
			case stdout:
				p.mu.Unlock()
				p.fail("the runtime wrote to stdout before the claim")
				p.mu.Lock()
			default:
				p.tail = append(p.tail, buf[:n]...)
				if len(p.tail) > 2048 {
					p.tail = p.tail[len(p.tail)-2048:]
				}
			}
			p.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (p *Preloaded) fail(reason string) {
	p.failOnce.Do(func() {
		p.mu.Lock()
		if tail := p.tail; len(tail) > 0 {
			reason += "; its stderr ended with: " + string(tail)
		}
		p.mu.Unlock()
		p.reason = reason
		close(p.failed)
	})
}

// Failed is closed when the runtime fails before the claim; Reason says why.
func (p *Preloaded) Failed() <-chan struct{} { return p.failed }

// Reason says why the runtime failed ("" while it has not).
func (p *Preloaded) Reason() string {
	select {
	case <-p.failed:
		return p.reason
	default:
		return ""
	}
}

// Kill ends the runtime and its channels (a slot that will not be claimed).
func (p *Preloaded) Kill() {
	_ = p.cmd.Process.Kill()
	_ = p.ctl.Close()
	go func() { _ = p.cmd.Wait() }()
}

// claim hands the runtime its run and returns its process once it said it started.
// Its output goes to stdout and stderr from now on. A refusal naming a missing
// entrypoint is bridgeapi.ErrCommandNotFound (bridgeapi.ExitNotFound); a runtime gone is ErrPreloadFailed.
func (p *Preloaded) claim(cfg Config) (*os.Process, int, error) {
	p.mu.Lock()
	p.claimed = true
	p.out, p.errOut = cfg.Stdout, cfg.Stderr
	p.mu.Unlock()
	select {
	case <-p.failed:
		return nil, bridgeapi.ExitBridgeFailed, fmt.Errorf("%w: %s", ErrPreloadFailed, p.reason)
	default:
	}
	c := bridgeapi.PreloadClaim{Argv: cfg.Argv, Env: cfg.Env, Dir: cfg.Dir}
	if !cfg.Deadline.IsZero() {
		c.DeadlineMS = cfg.Deadline.UnixMilli()
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if err := bridgeapi.WriteLine(p.ctl, c); err != nil {
		return nil, bridgeapi.ExitBridgeFailed, fmt.Errorf("%w: sending the claim: %v", ErrPreloadFailed, err)
	}
	var (
		a   bridgeapi.PreloadAnswer
		err error
	)
	select {
	case got := <-p.answer:
		a, err = got.a, got.err
	case <-p.failed:
		err = errors.New(p.reason)
	case <-time.After(claimAnswerTimeout):
		err = fmt.Errorf("no answer within %v", claimAnswerTimeout)
	}
	_ = p.ctl.Close()
	switch {
	case err != nil:
		return nil, bridgeapi.ExitBridgeFailed, fmt.Errorf("%w: no answer to the claim: %v", ErrPreloadFailed, err)
	case a.Error != nil && a.Error.Code == bridgeapi.PreloadErrEntryNotFound:
		return nil, bridgeapi.ExitNotFound, fmt.Errorf("%w: %s: %v", bridgeapi.ErrCommandNotFound, a.Error.Entry, a.Error)
	case a.Error != nil:
		return nil, bridgeapi.ExitCannotExec, fmt.Errorf("%w: %s: %v", bridgeapi.ErrCannotExec, a.Error.Entry, a.Error)
	case !a.Started:
		return nil, bridgeapi.ExitBridgeFailed, fmt.Errorf("%w: the runtime neither started nor refused the run", ErrPreloadFailed)
	}
	return p.cmd.Process, 0, nil
}

// wait waits for the runtime's exit (when the bridge does not reap everything).
func (p *Preloaded) wait() int {
	err := p.cmd.Wait()
	return exitCode(p.cmd.ProcessState, err)
}

// drain waits (bounded: a descendant may hold the pipes) for the runtime's output to
// be forwarded.
func (p *Preloaded) drain() {
	if !p.waitCopies(2 * time.Second) {
		p.log.Debug("bridge: the preloaded runtime's output did not end after its exit")
	}
}

// waitCopies waits up to d for the runtime's output to be forwarded, and reports
// whether it was.
func (p *Preloaded) waitCopies(d time.Duration) bool {
	done := make(chan struct{})
	go func() { p.copies.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
