package bridgeapi

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/errdefs"
)

// A session's output log: the bridge of a long-running sandbox writes its command's
// stdout and stderr (and its own notices on stderr) into two files of a host directory
// mounted at SessionLogDir, and every reader on the host reads them by offset, so any
// number of readers in any number of host processes see every byte, none takes bytes
// from another, and a reader that falls behind learns exactly how many it missed.
//
// Each file is a ring: a LogHeaderSize header, then Capacity bytes of data. The byte at
// offset o of the stream (counted from the session's start) is at data[o % Capacity]
// while o >= end-Capacity, where end (the header's head) is the number of bytes written
// so far. The writer never waits for a reader: it overwrites the oldest bytes.
//
// A write stores the new end as reserved first, then the bytes, then the end as
// written (head). A reader takes the head, reads the bytes, then takes the reserve:
// whatever it read below reserve-Capacity may have been overwritten meanwhile and is
// dropped (ReadLog). Both counters are stored with their bitwise complement, so a torn
// read is seen as one.
//
// The directory is writable by the sandbox (the bridge runs as the sandbox's user):
// the agent can write these files as it can write its output. A host reads them as
// untrusted input: bounded, never following a link, and a header that does not hold
// together is ErrLogCorrupt.
const (
	// SessionLogDir is where a session's log directory is mounted in the sandbox.
	SessionLogDir = "/.agentsandbox/log"
	// LogStdout and LogStderr are the streams' file names in it.
	LogStdout = "stdout"
	LogStderr = "stderr"
	// LogHeaderSize is the size of a log file's header.
	LogHeaderSize = 64
	// MaxLogCapacity bounds a log's data.
	MaxLogCapacity = 1 << 30
)

// Header layout.
const (
	logMagic      = "ASLOGv1\x00"
	offCapacity   = 8
	offReserve    = 16
	offHead       = 32
	maxTornReads  = 100
	tornReadPause = 100 * time.Microsecond
)

// ErrLogCorrupt is the error of a log file whose header or counters do not hold
// together (not a log, another capacity, an end that went backwards): written by
// something other than the bridge.
var ErrLogCorrupt = errdefs.ErrLogCorrupt

// CreateLog makes a new, empty log file of capacity bytes at path (it must not exist),
// with mode perm, at its full size (the data is allocated up front: a full disk fails
// here rather than later).
func CreateLog(path string, capacity int64, perm os.FileMode) error {
	if capacity <= 0 || capacity > MaxLogCapacity {
		return fmt.Errorf("bridgeapi: log capacity %d out of (0, %d]", capacity, MaxLogCapacity)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	h := make([]byte, LogHeaderSize)
	copy(h, logMagic)
	binary.LittleEndian.PutUint64(h[offCapacity:], uint64(capacity))
	putPair(h[offReserve:], 0)
	putPair(h[offHead:], 0)
	_, err = f.Write(h)
	if err == nil {
		// Zeros written, not a sparse file: the blocks exist before the sandbox runs.
		_, err = io.CopyN(f, zeros{}, capacity)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func putPair(b []byte, v uint64) {
	binary.LittleEndian.PutUint64(b, v)
	binary.LittleEndian.PutUint64(b[8:], ^v)
}

// LogWriter appends to a log file (the bridge's end). Its methods are safe for
// concurrent use; each Write is one contiguous piece of the stream.
type LogWriter struct {
	mu       sync.Mutex
	f        *os.File
	capacity int64
	head     int64
	pair     [16]byte
}

// OpenLogWriter opens the log file at path, which CreateLog made, for appending after
// what it holds.
func OpenLogWriter(path string) (*LogWriter, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	capacity, err := logCapacity(f)
	if err == nil {
		var head int64
		if head, err = readPair(f, offHead); err == nil {
			return &LogWriter{f: f, capacity: capacity, head: head}, nil
		}
	}
	f.Close()
	return nil, fmt.Errorf("%s: %w", path, err)
}

// logCapacity checks a log file's header and size and returns its capacity.
func logCapacity(f *os.File) (int64, error) {
	h := make([]byte, LogHeaderSize)
	if _, err := f.ReadAt(h, 0); err != nil {
		return 0, fmt.Errorf("%w: header: %v", ErrLogCorrupt, err)
	}
	capacity := int64(binary.LittleEndian.Uint64(h[offCapacity:]))
	if string(h[:len(logMagic)]) != logMagic || capacity <= 0 || capacity > MaxLogCapacity {
		return 0, fmt.Errorf("%w: not a log file", ErrLogCorrupt)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() || fi.Size() < LogHeaderSize+capacity {
		return 0, fmt.Errorf("%w: %d bytes, want %d", ErrLogCorrupt, fi.Size(), LogHeaderSize+capacity)
	}
	return capacity, nil
}

// Write implements io.Writer: p's last Capacity bytes go into the ring (older bytes
// of a larger p are overwritten at once), and the end moves by len(p).
func (w *LogWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	end := w.head + int64(len(p))
	data, at := p, w.head
	if int64(len(data)) > w.capacity {
		data, at = data[int64(len(data))-w.capacity:], end-w.capacity
	}
	if err := w.putCounter(offReserve, end); err != nil {
		return 0, err
	}
	for len(data) > 0 {
		i := at % w.capacity
		n := min(int64(len(data)), w.capacity-i)
		if _, err := w.f.WriteAt(data[:n], LogHeaderSize+i); err != nil {
			return 0, err
		}
		data, at = data[n:], at+n
	}
	if err := w.putCounter(offHead, end); err != nil {
		return 0, err
	}
	w.head = end
	return len(p), nil
}

func (w *LogWriter) putCounter(off int64, v int64) error {
	putPair(w.pair[:], uint64(v))
	_, err := w.f.WriteAt(w.pair[:], off)
	return err
}

// Close closes the file.
func (w *LogWriter) Close() error { return w.f.Close() }

// readPair reads a counter and its complement, again while they disagree (a write
// in progress), up to a bound: beyond it the header is ErrLogCorrupt.
func readPair(r io.ReaderAt, off int64) (int64, error) {
	var b [16]byte
	for i := 0; ; i++ {
		if _, err := r.ReadAt(b[:], off); err != nil {
			return 0, fmt.Errorf("%w: %v", ErrLogCorrupt, err)
		}
		v, c := binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:])
		if v == ^c && v <= 1<<62 {
			return int64(v), nil
		}
		if i == maxTornReads {
			return 0, fmt.Errorf("%w: counter at %d", ErrLogCorrupt, off)
		}
		time.Sleep(tornReadPause)
	}
}

// ReadLog reads a stream's bytes from offset from out of a log file (r, of the given
// capacity; check it with LogCapacity first): at most len(buf) bytes, into buf. It
// returns where they start (at > from when the log no longer holds from: the bytes in
// between were overwritten before they were read), how many there are, and the log's
// end when it looked (end == at+n: nothing more yet). A from beyond the end is
// ErrLogCorrupt: the end never goes back.
func ReadLog(r io.ReaderAt, capacity, from int64, buf []byte) (at int64, n int, end int64, err error) {
	for try := 0; ; try++ {
		at, n, end, again, err := readLog(r, capacity, from, buf)
		if !again || try == maxTornReads {
			return at, n, end, err
		}
	}
}

// readLog is one attempt of ReadLog; again says everything it read was overwritten
// while it read (a writer faster than this reader): read again.
func readLog(r io.ReaderAt, capacity, from int64, buf []byte) (at int64, n int, end int64, again bool, err error) {
	end, err = readPair(r, offHead)
	if err != nil {
		return from, 0, 0, false, err
	}
	if from > end {
		return from, 0, end, false, fmt.Errorf("%w: its end is %d, before %d", ErrLogCorrupt, end, from)
	}
	at = max(from, end-capacity)
	want := min(end-at, int64(len(buf)))
	for got := int64(0); got < want; {
		i := (at + got) % capacity
		k := min(want-got, capacity-i)
		if _, err := r.ReadAt(buf[got:got+k], LogHeaderSize+i); err != nil {
			return from, 0, end, false, fmt.Errorf("%w: %v", ErrLogCorrupt, err)
		}
		got += k
	}
	reserve, err := readPair(r, offReserve)
	if err != nil {
		return from, 0, end, false, err
	}
	if reserve < end {
		return from, 0, end, false, fmt.Errorf("%w: reserve %d before the end %d", ErrLogCorrupt, reserve, end)
	}
	// What a write in progress (or done since the head was read) may have overwritten.
	if lost := reserve - capacity - at; lost > 0 {
		if lost >= want && want > 0 {
			return from, 0, end, true, nil
		}
		lost = min(lost, want)
		copy(buf, buf[lost:want])
		at, want = at+lost, want-lost
	}
	return at, int(want), end, false, nil
}

// LogCapacity checks the header of the log file f and returns its capacity.
// Errors wrap ErrLogCorrupt for anything but a log file.
func LogCapacity(f *os.File) (int64, error) { return logCapacity(f) }
