package docker

import "sync"

// cappedBuffer keeps the first max bytes written and counts the rest, so a flooding
// container never grows host memory and its stream never blocks.
type cappedBuffer struct {
	mu        sync.Mutex
	max       int
	buf       []byte
	truncated bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - len(c.buf)
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

func (c *cappedBuffer) result() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.buf...), c.truncated
}
