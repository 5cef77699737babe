package session

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// MarkFlags are the bridge's flags that mark a session's streams with their offsets
// (bridgeapi.OutputMark), for a runtime whose log rotation drops output without a
// count (Docker's json-file): a mark every sixteenth of the log limit, so that one
// survives in what the log keeps even when its per-line overhead is large.
func MarkFlags(limit int) []string {
	if limit <= 0 {
		return nil
	}
	return []string{"-" + bridgeapi.FlagOutputMarks, strconv.Itoa(max(1<<10, limit/16))}
}

// markPrefix is what starts a mark; maxMarkDigits bounds the offset's digits.
var markPrefix = []byte(bridgeapi.OutputMark)

const maxMarkDigits = 19

// counter is one of a session's streams on its way into its ring. It takes the
// bridge's offset marks out and counts the bytes of the agent's output this handle
// never received: those the bridge dropped (its DroppedNotice lines, passed on) and
// those a mark shows missing (a log the runtime rotated before the handle attached),
// for which it writes a DroppedNotice line of its own into the ring.
type counter struct {
	ring *Ring
	name string

	mu      sync.Mutex
	pend    []byte // a mark begun in one write and ended in the next
	npend   []byte // a bridge's notice line begun, held until its end (see pass)
	seen    int64  // the agent's bytes accounted for: received, or counted as dropped
	dropped int64
}

// Write implements io.Writer. It never fails: the ring takes everything.
func (c *counter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := p
	if len(c.pend) > 0 {
		b = append(c.pend, p...)
		c.pend = nil
	}
	for len(b) > 0 {
		i := bytes.Index(b, markPrefix)
		if i < 0 {
			k := partialPrefix(b, markPrefix)
			c.pass(b[:len(b)-k])
			if k > 0 {
				c.pend = append([]byte(nil), b[len(b)-k:]...)
			}
			break
		}
		c.pass(b[:i])
		rest := b[i+len(markPrefix):]
		j := bytes.IndexByte(rest, 0)
		if j < 0 && len(rest) <= maxMarkDigits {
			c.pend = append([]byte(nil), b[i:]...) // the rest comes with the next write
			break
		}
		off, err := strconv.ParseInt(string(rest[:max(j, 0)]), 10, 64)
		if j < 0 || err != nil || off < 0 {
			// Not a mark after all (the agent's own bytes): pass its first byte on.
			c.pass(b[i : i+1])
			b = b[i+1:]
			continue
		}
		if gap := off - c.seen; gap > 0 {
			c.dropped += gap
			c.seen = off
			fmt.Fprintf(c.ring, "\n%s%d bytes of %s: the runtime's log dropped them before a host attached\n", bridgeapi.DroppedNotice, gap, c.name)
		}
		b = rest[j+1:]
	}
	return len(p), nil
}

// notice starts the bridge's DroppedNotice lines; noticeLine bounds one.
var notice = []byte(bridgeapi.DroppedNotice)

const noticeLine = 256

// pass writes the agent's bytes b into the ring, counting them, and what a
// DroppedNotice line of the bridge's among them says it dropped. The start of a
// notice line whose end has not come yet is held for the next write (or flush).
func (c *counter) pass(b []byte) {
	if len(c.npend) > 0 {
		b = append(c.npend, b...)
		c.npend = nil
	}
	hold := len(b)
	if i := bytes.LastIndex(b, notice); i >= 0 && bytes.IndexByte(b[i:], '\n') < 0 && len(b)-i < noticeLine {
		hold = i
	} else if k := partialPrefix(b, notice); k > 0 {
		hold = len(b) - k
	}
	if hold < len(b) {
		c.npend = append([]byte(nil), b[hold:]...)
		b = b[:hold]
	}
	c.write(b)
}

// write puts b into the ring and counts it (see pass).
func (c *counter) write(b []byte) {
	if len(b) == 0 {
		return
	}
	c.ring.Write(b)
	c.seen += int64(len(b))
	for rest := b; ; {
		i := bytes.Index(rest, notice)
		if i < 0 {
			return
		}
		rest = rest[i+len(notice):]
		var n int64
		if _, err := fmt.Sscanf(string(rest[:min(len(rest), maxMarkDigits)]), "%d", &n); err == nil && n > 0 {
			// The bridge's own line (a newline, the notice, the rest up to a newline)
			// is not the agent's output; the bytes it counts are.
			line := int64(len(notice)) + 1
			if e := bytes.IndexByte(rest, '\n'); e >= 0 {
				line += int64(e) + 1
			}
			c.dropped += n
			c.seen += n - line
		}
	}
}

// flush writes what pass held back.
func (c *counter) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.npend
	c.npend = nil
	c.write(b)
}

// counts returns the bytes dropped so far.
func (c *counter) counts() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// partialPrefix returns the length of the longest end of b that begins prefix.
func partialPrefix(b, prefix []byte) int {
	for k := min(len(b), len(prefix)-1); k > 0; k-- {
		if bytes.HasSuffix(b, prefix[:k]) {
			return k
		}
	}
	return 0
}
