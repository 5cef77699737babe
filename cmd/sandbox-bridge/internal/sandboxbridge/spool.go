package sandboxbridge

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// spoolChunk is the most a spool hands its writer at once.
const spoolChunk = 64 << 10

// SpoolFlushGrace bounds how long the bridge, once its child has exited, waits for its
// spools to hand what they keep to its own output (a host may not be reading).
const SpoolFlushGrace = 2 * time.Second

// spool relays one output stream of the child to the bridge's own without ever
// blocking the child: a reader drains the child's pipe into a buffer of at most max
// bytes while a writer hands the buffer to out. When out does not take it (no host is
// reading: a containerd shim's FIFO without a reader stops taking bytes), the buffer
// keeps the newest max bytes, drops the oldest and counts them, and the writer says
// how many in a bridgeapi.DroppedNotice line before what it kept, once out takes bytes again.
type spool struct {
	name string
	out  io.Writer
	max  int

	mu      sync.Mutex
	wake    *sync.Cond
	buf     []byte
	dropped int64
	eof     bool // the child's pipe ended
	done    chan struct{}

	// every is the distance between marks (0: none); offset counts the child's bytes
	// handed out or dropped so far, next is where the next mark goes.
	every, offset, next int64
}

// newSpool returns the write end to give the child and starts relaying.
// With every positive, it marks the stream every that many bytes (see bridgeapi.OutputMark);
// zero or less: no marks.
func newSpool(name string, out io.Writer, max int, every int64) (*spool, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("bridge: spool pipe: %w", err)
	}
	s := &spool{name: name, out: out, max: max, done: make(chan struct{})}
	if every > 0 {
		s.every, s.next = every, every
	}
	s.wake = sync.NewCond(&s.mu)
	go s.read(r)
	go s.write()
	return s, w, nil
}

func (s *spool) read(r *os.File) {
	defer r.Close()
	b := make([]byte, 32<<10)
	for {
		n, err := r.Read(b)
		if n > 0 {
			s.mu.Lock()
			s.buf = append(s.buf, b[:n]...)
			if over := len(s.buf) - s.max; over > 0 {
				s.dropped += int64(over)
				s.buf = append(s.buf[:0], s.buf[over:]...)
			}
			s.mu.Unlock()
			s.wake.Signal()
		}
		if err != nil {
			s.mu.Lock()
			s.eof = true
			s.mu.Unlock()
			s.wake.Signal()
			return
		}
	}
}

func (s *spool) write() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.buf) == 0 && s.dropped == 0 && !s.eof {
			s.wake.Wait()
		}
		if len(s.buf) == 0 && s.dropped == 0 {
			s.mu.Unlock()
			return
		}
		dropped := s.dropped
		s.dropped = 0
		n := min(len(s.buf), spoolChunk)
		var mark bool
		if s.every > 0 {
			s.offset += dropped
			if s.offset >= s.next {
				mark, s.next = true, (s.offset/s.every+1)*s.every
			}
			n = min(n, int(s.next-s.offset)) // marks fall on multiples of every
		}
		at := s.offset
		s.offset += int64(n)
		chunk := append([]byte(nil), s.buf[:n]...)
		s.buf = append(s.buf[:0], s.buf[n:]...)
		s.mu.Unlock()
		if dropped > 0 {
			if _, err := fmt.Fprintf(s.out, "\n%s%d bytes of %s: no host was reading\n", bridgeapi.DroppedNotice, dropped, s.name); err != nil {
				return
			}
		}
		if mark {
			if _, err := fmt.Fprintf(s.out, "%s%d\x00", bridgeapi.OutputMark, at); err != nil {
				return
			}
		}
		if _, err := s.out.Write(chunk); err != nil {
			return // the bridge's own output is gone: nothing more can be delivered
		}
	}
}

// flush waits until the spool has handed out everything, or until the deadline.
func (s *spool) flush(deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-s.done:
		return true
	case <-t.C:
		return false
	}
}
