// Package capture holds the capped output buffer the runner adapters share.
package capture

import "sync"

// Buffer keeps the first Max bytes written and drops the rest, flagging it, so a
// flooding sandbox never grows host memory and its stream never blocks.
type Buffer struct {
	Max       int
	mu        sync.Mutex
	buf       []byte
	truncated bool
}

// Write implements io.Writer; it never fails.
func (c *Buffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
