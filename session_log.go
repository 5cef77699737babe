package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agentsandbox/sandbox/port"
)

// Follow returns a reader of the session's main process's output (see
// port.LogFollower): from the start, from now, or from a position (a LogSnapshot's
// End continues it with no byte lost or repeated). Any number of readers see every
// byte; a reader more than the session's LogLimit behind is told exactly how much it
// missed. Errors wrap port.ErrUnsupported for a runner whose sessions have no output
// log.
func (ss *Session) Follow(ctx context.Context, opts port.FollowOptions) (port.LogReader, error) {
	lf, ok := ss.sess.(port.LogFollower)
	if !ok {
		return nil, fmt.Errorf("sandbox: session %s: %w: the runner's sessions have no output log", ss.req.RunID, port.ErrUnsupported)
	}
	return lf.Follow(ctx, opts)
}

// LogSnapshot returns what the session's output log holds now and where it starts
// and ends (see port.LogFollower).
func (ss *Session) LogSnapshot() (port.LogSnapshot, error) {
	lf, ok := ss.sess.(port.LogFollower)
	if !ok {
		return port.LogSnapshot{}, fmt.Errorf("sandbox: session %s: %w: the runner's sessions have no output log", ss.req.RunID, port.ErrUnsupported)
	}
	return lf.LogSnapshot()
}

// CopyLogs copies what r reads to stdout and stderr (either may be nil to drop that
// stream) until the session ends (it returns nil then) or ctx ends, and returns how
// many bytes of each stream it could not copy because the session's log no longer
// held them when r got there. A writer's error stops it. It closes r.
func CopyLogs(ctx context.Context, r port.LogReader, stdout, stderr io.Writer) (dropped port.LogPosition, err error) {
	defer r.Close()
	for {
		c, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return dropped, nil
		}
		if err != nil {
			return dropped, err
		}
		w := stdout
		if c.Stream == port.LogStderr {
			w, dropped.Stderr = stderr, dropped.Stderr+c.Dropped
		} else {
			dropped.Stdout += c.Dropped
		}
		if w == nil {
			continue
		}
		if _, err := w.Write(c.Data); err != nil {
			return dropped, err
		}
	}
}
