// Package capture holds the capped output buffer the runner adapters share.
package capture

import (
	"bytes"
	"sync"
)

// Buffer keeps the first Max bytes written and drops the rest, flagging it, so a
// flooding sandbox never grows host memory and its stream never blocks.
type Buffer struct {
	Max       int
	mu        sync.Mutex
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
	defer c.mu.Unlock()
	if len(p) >= tailLen {
		c.tail = append(c.tail[:0], p[len(p)-tailLen:]...)
	} else {
		c.tail = append(c.tail, p...)
		if over := len(c.tail) - tailLen; over > 0 {
			c.tail = append(c.tail[:0], c.tail[over:]...)
		}
	}
	room := c.Max - len(c.buf)
	if room >= len(p) {
		c.buf = append(c.buf, p...)
	} else {
		if room > 0 {
			c.buf = append(c.buf, p[:room]...)
		}
		c.truncated = true
	}
	return len(p), nil
}

// Result returns a copy of what was kept and whether anything was dropped.
func (c *Buffer) Result() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
