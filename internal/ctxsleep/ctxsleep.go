// Package ctxsleep waits a while unless a context ends first: the pause of the
// library's retry and poll loops.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d and reports true, or reports false as soon as ctx ends. A d of zero
// or less returns true at once.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
