package sandboxbridge

import (
	"context"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// withDeadline ends ctx with bridgeapi.ErrDeadline at d. With a deadline file
// (Config.DeadlineFile, bridgeapi's format), the file is read when d passes: a later
// time there (plus bridgeapi.DeadlineSlack, the bridge's margin over the host's deadline) is
// waited for instead, and read again when it passes. The file is the host's (a
// read-only mount): the sandbox cannot move its own deadline.
func withDeadline(ctx context.Context, d time.Time, file string) (context.Context, context.CancelFunc) {
	if file == "" {
		return context.WithDeadlineCause(ctx, d, bridgeapi.ErrDeadline)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTimer(time.Until(d))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if moved, ok := readDeadlineFile(file); ok {
				if later := moved.Add(bridgeapi.DeadlineSlack); later.After(d) && time.Until(later) > 0 {
					d = later
					t.Reset(time.Until(d))
					continue
				}
			}
			cancel(bridgeapi.ErrDeadline)
			return
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// readDeadlineFile reads a deadline file without following a link or blocking on a
// FIFO, at most bridgeapi.MaxDeadlineFileBytes.
func readDeadlineFile(name string) (time.Time, bool) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return time.Time{}, false
	}
	b, err := io.ReadAll(io.LimitReader(f, bridgeapi.MaxDeadlineFileBytes+1))
	if err != nil {
		return time.Time{}, false
	}
	t, err := bridgeapi.ParseDeadline(b)
	return t, err == nil
}
