package sandboxbridge

import (
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// ExitRecordGrace bounds how long a stub, once its command has exited, waits for
// the command's output to end before it gives up proving it whole (and writes no
// exit record: the host then waits for the runtime's exit report).
const ExitRecordGrace = 2 * time.Second

// ExitReporter passes a claimed command's output through pipes to the stub's own
// stdout and stderr, so the stub knows when each stream is complete, and then ends
// each with an exit record (bridgeapi.ExitRecord) keyed by the claim's nonce.
type ExitReporter struct {
	nonce      string
	out, errs  io.Writer // the stub's own streams
	outW, errW *os.File  // the command's ends (and the stub's messages')
	copies     sync.WaitGroup
	finish     sync.Once
}

// NewExitReporter starts passing what is written to Stdout and Stderr on to stdout
// and stderr.
func NewExitReporter(nonce string, stdout, stderr io.Writer) (*ExitReporter, error) {
	r := &ExitReporter{nonce: nonce, out: stdout, errs: stderr}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = outR.Close()
		_ = outW.Close()
		return nil, err
	}
	r.outW, r.errW = outW, errW
	r.copies.Add(2)
	go r.copy(stdout, outR)
	go r.copy(stderr, errR)
	return r, nil
}

func (r *ExitReporter) copy(dst io.Writer, src *os.File) {
	defer r.copies.Done()
	defer src.Close()
	_, _ = io.Copy(dst, src)
}

// Stdout is the command's stdout.
func (r *ExitReporter) Stdout() *os.File { return r.outW }

// Stderr is the command's stderr, and where the stub writes its own messages about
// the run (so they come before the record).
func (r *ExitReporter) Stderr() *os.File { return r.errW }

// Finish ends the run's output with code's exit record on both streams, once they
// are proven complete: every other process of the sandbox is killed first when the
// stub is its init (they would die with it a moment later anyway, and a descendant
// that kept a stream open would otherwise leave its end unknown), then pre's output
// (if any) must have been passed on, then both pipes must reach their end, within
// ExitRecordGrace. It reports whether it wrote the records. Call it once the command
// has exited and the stub has written its last message.
func (r *ExitReporter) Finish(code int, pre *Preloaded) (wrote bool) {
	r.finish.Do(func() {
		if os.Getpid() == 1 {
			// As a namespace's init, kill(-1) reaches every other process in it
			// and nothing outside.
			_ = syscall.Kill(-1, syscall.SIGKILL)
		}
		until := time.Now().Add(ExitRecordGrace)
		if pre != nil && !pre.waitCopies(time.Until(until)) {
			return
		}
		_ = r.outW.Close()
		_ = r.errW.Close()
		done := make(chan struct{})
		go func() { r.copies.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Until(until)):
			return
		}
		rec := bridgeapi.ExitRecord(r.nonce, code)
		_, e1 := r.errs.Write(rec)
		_, e2 := r.out.Write(rec)
		wrote = e1 == nil && e2 == nil
	})
	return wrote
}
