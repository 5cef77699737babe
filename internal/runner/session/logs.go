package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// logDir is the part of a session's host directory that holds its output log
// (bridgeapi's ring files), mounted at bridgeapi.SessionLogDir.
const logDir = "log"

// LogDir is the part of a session's host directory mounted at bridgeapi.SessionLogDir.
func LogDir(dir string) string { return filepath.Join(dir, logDir) }

// LogFlags are the bridge's flags that make it write a session's output log.
func LogFlags() []string { return []string{"-" + bridgeapi.FlagLogDir, bridgeapi.SessionLogDir} }

// createLog makes the log directory of the session directory dir with its two files
// of limit bytes each, writable by the sandbox's user (the bridge writes them).
func createLog(dir, user string, limit int) error {
	ld := LogDir(dir)
	if err := os.Mkdir(ld, 0o700); err != nil {
		return fmt.Errorf("log dir: %w", err)
	}
	uid, gid := parseUser(user)
	chown := os.Chown(ld, uid, gid) == nil
	if !chown {
		// Not root: let the sandbox's user in by mode instead (see CreateDir).
		if err := os.Chmod(ld, 0o733); err != nil {
			return fmt.Errorf("log dir: %w", err)
		}
	}
	for _, name := range []string{bridgeapi.LogStdout, bridgeapi.LogStderr} {
		p := filepath.Join(ld, name)
		perm := os.FileMode(0o600)
		if !chown {
			perm = 0o666
		}
		if err := bridgeapi.CreateLog(p, int64(limit), perm); err != nil {
			return fmt.Errorf("log %s: %w", name, err)
		}
		if chown {
			if err := os.Chown(p, uid, gid); err != nil {
				return fmt.Errorf("log %s: %w", name, err)
			}
		} else if err := os.Chmod(p, perm); err != nil { // past the umask
			return fmt.Errorf("log %s: %w", name, err)
		}
	}
	return nil
}

// logFiles are a session's two log files, opened for reading.
type logFiles struct {
	out, err *os.File
	capacity int64
}

// openLog opens the log of the session directory dir, whose streams hold limit bytes
// each. The directory is the sandbox's to write: a file is opened without following
// a link, and must be a regular file with a log's header of that capacity.
func openLog(dir string, limit int) (*logFiles, error) {
	open := func(name string) (*os.File, error) {
		f, err := os.OpenFile(filepath.Join(LogDir(dir), name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil, fmt.Errorf("session log %s: %w", name, err)
		}
		c, err := bridgeapi.LogCapacity(f)
		if err == nil && c != int64(limit) {
			err = fmt.Errorf("%w: capacity %d, the session's log limit is %d", port.ErrLogCorrupt, c, limit)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("session log %s: %w", name, err)
		}
		return f, nil
	}
	out, err := open(bridgeapi.LogStdout)
	if err != nil {
		return nil, err
	}
	errf, err := open(bridgeapi.LogStderr)
	if err != nil {
		out.Close()
		return nil, err
	}
	return &logFiles{out: out, err: errf, capacity: int64(limit)}, nil
}

func (l *logFiles) Close() error { return errors.Join(l.out.Close(), l.err.Close()) }

func (l *logFiles) file(s port.LogStream) *os.File {
	if s == port.LogStderr {
		return l.err
	}
	return l.out
}

// read reads stream s from offset from into buf (see bridgeapi.ReadLog).
func (l *logFiles) read(s port.LogStream, from int64, buf []byte) (at int64, n int, end int64, err error) {
	return bridgeapi.ReadLog(l.file(s), l.capacity, from, buf)
}

// snapshot returns what the log holds of each stream and where that starts and ends.
func (l *logFiles) snapshot() (port.LogSnapshot, error) {
	var snap port.LogSnapshot
	for _, s := range []port.LogStream{port.LogStdout, port.LogStderr} {
		buf := make([]byte, l.capacity)
		at, n, _, err := l.read(s, 0, buf)
		if err != nil {
			return snap, fmt.Errorf("session log %s: %w", s, err)
		}
		if s == port.LogStdout {
			snap.Stdout, snap.Start.Stdout, snap.End.Stdout = buf[:n:n], at, at+int64(n)
		} else {
			snap.Stderr, snap.Start.Stderr, snap.End.Stderr = buf[:n:n], at, at+int64(n)
		}
	}
	return snap, nil
}

// maxChunk bounds the data of one LogChunk.
const maxChunk = 64 << 10

// Polling for new output: fast while it flows, slower while it does not.
const (
	pollMin = 5 * time.Millisecond
	pollMax = 100 * time.Millisecond
)

// logReader follows a session's log (port.LogReader). It holds its own open files,
// so it goes on whatever the handle it came from does, until the session ends.
type logReader struct {
	log *logFiles
	// pos is only written by Next, and read by Position from any goroutine.
	posMu sync.Mutex
	pos   port.LogPosition
	done  <-chan struct{} // the handle's: the session ended, or the handle was detached
	// gone reports whether done means the handle stopped watching (Detach), not that
	// the session ended.
	gone func() bool
	next port.LogStream // the stream read first next time (the two take turns)
	wait time.Duration
	buf  []byte // scratch for reads; a chunk gets a copy of what it holds

	closeOnce sync.Once
}

// newLogReader returns a reader of the session directory dir's log from opts.
func newLogReader(dir string, limit int, opts port.FollowOptions, done <-chan struct{}, gone func() bool) (*logReader, error) {
	l, err := openLog(dir, limit)
	if err != nil {
		return nil, err
	}
	r := &logReader{log: l, pos: opts.From, done: done, gone: gone, next: port.LogStdout, wait: pollMin}
	snap, err := l.snapshot()
	if err != nil {
		l.Close()
		return nil, err
	}
	if opts.Now {
		r.pos = snap.End
	}
	if p := r.pos; p.Stdout < 0 || p.Stderr < 0 || p.Stdout > snap.End.Stdout || p.Stderr > snap.End.Stderr {
		l.Close()
		return nil, port.Invalidf("follow from %+v: the session's output is at %+v", p, snap.End)
	}
	return r, nil
}

// Next implements port.LogReader.
func (r *logReader) Next(ctx context.Context) (port.LogChunk, error) {
	for {
		ended := false
		select {
		case <-r.done:
			// Once the process has exited its log no longer moves: what is there
			// now is all there will be.
			if r.gone() {
				return port.LogChunk{}, fmt.Errorf("%w: the session's handle was detached", port.ErrClosed)
			}
			ended = true
		default:
		}
		c, ok, err := r.poll()
		if err != nil || ok {
			return c, err
		}
		if ended {
			return port.LogChunk{}, io.EOF
		}
		t := time.NewTimer(r.wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return port.LogChunk{}, ctx.Err()
		case <-r.done:
			t.Stop()
		case <-t.C:
			r.wait = min(r.wait*2, pollMax)
		}
	}
}

// poll reads what the log has past the reader's position, from one stream: the one
// whose turn it is, else the other.
func (r *logReader) poll() (port.LogChunk, bool, error) {
	for range 2 {
		s := r.next
		r.next = port.LogStdout + port.LogStderr - s
		r.posMu.Lock()
		from := &r.pos.Stdout
		if s == port.LogStderr {
			from = &r.pos.Stderr
		}
		r.posMu.Unlock()
		if r.buf == nil {
			r.buf = make([]byte, min(maxChunk, r.log.capacity))
		}
		at, n, _, err := r.log.read(s, *from, r.buf)
		if err != nil {
			return port.LogChunk{}, false, fmt.Errorf("session log %s: %w", s, err)
		}
		if n == 0 && at == *from {
			continue
		}
		c := port.LogChunk{Stream: s, Offset: at, Data: append([]byte(nil), r.buf[:n]...), Dropped: at - *from}
		r.posMu.Lock()
		*from = at + int64(n)
		r.posMu.Unlock()
		r.wait = pollMin
		return c, true, nil
	}
	return port.LogChunk{}, false, nil
}

// Position implements port.LogReader; it is safe to call while Next runs.
func (r *logReader) Position() port.LogPosition {
	r.posMu.Lock()
	defer r.posMu.Unlock()
	return r.pos
}

// Close implements port.LogReader.
func (r *logReader) Close() error {
	var err error
	r.closeOnce.Do(func() { err = r.log.Close() })
	return err
}
