package warmpool

import (
	"bytes"
	"io"
	"strconv"
	"sync"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// maxCodeDigits bounds the code of an exit record ("-" and digits).
const maxCodeDigits = 12

// ExitWatch reads a claimed stub's exit records (bridgeapi.ExitRecord) off its two
// output streams: put Stdout and Stderr in front of the run's buffers. Everything
// before a stream's record with the claim's nonce passes on unchanged; the record and
// anything after it do not. Once both streams had theirs, the run's output is whole
// and Done is closed: the run ended, with Code, whether or not the runtime has
// reported the sandbox's exit yet. A record with any other nonce is the agent's
// output like any other.
type ExitWatch struct {
	out, err *trailer
	done     chan struct{}
	once     sync.Once
}

// NewExitWatch watches for nonce's records in front of stdout and stderr.
func NewExitWatch(nonce string, stdout, stderr io.Writer) *ExitWatch {
	w := &ExitWatch{done: make(chan struct{})}
	marker := []byte(bridgeapi.ExitRecordPrefix + nonce + " ")
	w.out = &trailer{marker: marker, dst: stdout, ended: w.ended}
	w.err = &trailer{marker: marker, dst: stderr, ended: w.ended}
	return w
}

// Stdout is the writer for the stub's stdout.
func (w *ExitWatch) Stdout() io.Writer { return w.out }

// Stderr is the writer for the stub's stderr.
func (w *ExitWatch) Stderr() io.Writer { return w.err }

// Done is closed once both streams' records arrived, agreeing on the code.
func (w *ExitWatch) Done() <-chan struct{} { return w.done }

// Code is the run's exit code, once Done is closed.
func (w *ExitWatch) Code() int {
	c, _ := w.out.result()
	return c
}

// Flush passes on what a stream holds back because it might begin a record: for a
// run that ended without records (the runtime's exit report is the run's end), once
// its streams have ended.
func (w *ExitWatch) Flush() {
	w.out.flush()
	w.err.flush()
}

func (w *ExitWatch) ended() {
	co, oko := w.out.result()
	ce, oke := w.err.result()
	if oko && oke && co == ce {
		w.once.Do(func() { close(w.done) })
	}
}

// trailer passes one stream on up to its exit record.
type trailer struct {
	marker []byte // the record's prefix and nonce
	dst    io.Writer
	ended  func()

	mu    sync.Mutex
	held  []byte // the end of what came: a possible start of the marker, or the record's code
	found bool   // the marker came; held is the code so far
	done  bool   // the record is complete (or malformed: then ok is false)
	ok    bool
	code  int
}

// Write implements io.Writer.
func (t *trailer) Write(b []byte) (int, error) {
	n := len(b)
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return n, nil
	}
	data := append(t.held, b...)
	t.held = nil
	var pass []byte
	if !t.found {
		if i := bytes.Index(data, t.marker); i >= 0 {
			pass, data, t.found = data[:i], data[i+len(t.marker):], true
		} else {
			k := partialSuffix(data, t.marker)
			pass, t.held = data[:len(data)-k], append([]byte(nil), data[len(data)-k:]...)
		}
	}
	complete := false
	if t.found {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			c, err := strconv.Atoi(string(data[:i]))
			t.done, t.ok, t.code, complete = true, err == nil, c, true
		} else if len(data) > maxCodeDigits {
			t.done, complete = true, true // malformed: no end known from it
		} else {
			t.held = append([]byte(nil), data...)
		}
	}
	var err error
	if len(pass) > 0 {
		// Under the lock: the stream's bytes stay in order.
		_, err = t.dst.Write(pass)
	}
	t.mu.Unlock()
	if complete {
		t.ended()
	}
	return n, err
}

// flush passes on a held-back possible start of the marker (none once it came).
func (t *trailer) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.found && len(t.held) > 0 {
		_, _ = t.dst.Write(t.held)
		t.held = nil
	}
}

func (t *trailer) result() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.code, t.done && t.ok
}

// partialSuffix is the length of the longest end of data that begins marker.
func partialSuffix(data, marker []byte) int {
	for k := min(len(data), len(marker)-1); k > 0; k-- {
		if bytes.HasPrefix(marker, data[len(data)-k:]) {
			return k
		}
	}
	return 0
}
