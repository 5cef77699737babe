// Package capture holds the capped output buffer the runner adapters share.
package capture

import (
	"bytes"
	"io"
	"sync"
)

// Buffer keeps the first Max bytes written and drops the rest, flagging it, so a
// flooding sandbox never grows host memory and its stream never blocks.
//
// Live, if set, gets each kept part as it is written (so never more than Max bytes),
// outside the lock: one writer at a time keeps the order. A Live writer that fails is
// dropped; so is one still set when Result is called, so nothing is written after it.
type Buffer struct {
	Max  int
	Live io.Writer

	mu        sync.Mutex
	liveOff   bool
	buf       []byte
	truncated bool
	tail      []byte // the last tailLen bytes written, kept even past Max
}

// tailLen is how much of the end of a stream a Buffer keeps for Tail: enough for the
// bridge's notices.
const tailLen = 256

// Write implements io.Writer; it never fails.
func (c *Buffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	if len(p) >= tailLen {
		c.tail = append(c.tail[:0], p[len(p)-tailLen:]...)
	} else {
		c.tail = append(c.tail, p...)
		if over := len(c.tail) - tailLen; over > 0 {
			c.tail = append(c.tail[:0], c.tail[over:]...)
		}
	}
	kept := p
	if room := c.Max - len(c.buf); room < len(p) {
		kept = p[:max(room, 0)]
		c.truncated = true
	}
	c.buf = append(c.buf, kept...)
	live := c.Live
	if c.liveOff || len(kept) == 0 {
		live = nil
	}
	c.mu.Unlock()
	if live != nil {
		if _, err := live.Write(kept); err != nil {
			c.mu.Lock()
			c.liveOff = true
			c.mu.Unlock()
		}
	}
	return len(p), nil
}

// Result returns a copy of what was kept and whether anything was dropped.
func (c *Buffer) Result() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.liveOff = true
	return append([]byte(nil), c.buf...), c.truncated
}

// Tail returns a copy of the last bytes written (up to 256), whether or not they were
// kept within Max.
func (c *Buffer) Tail() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.tail...)
}

// TrimNotice reports whether the stream ended with notice (looked for in tail, which
// survives truncation) and returns out without the notice when out holds it.
func TrimNotice(out, tail []byte, notice string) ([]byte, bool) {
	if !bytes.HasSuffix(tail, []byte(notice)) {
		return out, false
	}
	return bytes.TrimSuffix(out, []byte(notice)), true
}
