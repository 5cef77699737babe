package port

import (
	"context"
	"time"

	"github.com/agentsandbox/sandbox/errdefs"
)

// ErrPaused reports an operation a paused session cannot serve (see PausableSession).
var ErrPaused = errdefs.ErrPaused

// PausableSession is an optional capability of a Session, found by type assertion:
// freezing every process of the sandbox (the cgroup freezer: Docker's pause,
// containerd's Task.Pause) and thawing it. A paused sandbox uses no CPU and keeps its
// memory, its processes, its open connections and its files; nothing in it can tell
// it was paused except the clock.
//
// While paused:
//   - Exec and Dial fail with an error wrapping ErrPaused (the sandbox cannot answer);
//     Wait, Logs, ReadFile and WriteFile work as usual (the workspace is the host's).
//   - The session's lifetime (Limits.Timeout) keeps running by default: a paused
//     sandbox still holds its memory, and the lifetime is what bounds how long an
//     abandoned session holds it. With PauseOptions.StopClock it does not: Resume
//     moves the deadline later by the time spent paused, for the host and for the
//     bridge inside (which reads the new deadline from a read-only file the host
//     writes), so a session paused for a week is not ended by its lifetime when it
//     resumes.
//   - A lifetime that ends, a Stop or a Sweep ends a paused session as a running one:
//     the sandbox is thawed to be killed.
//   - The heartbeat goes on while a handle is held, so a Sweep treats a paused
//     session like a running one: kept while some host cares, removed one grace
//     period after the last heartbeat.
//
// A paused session survives its host: the pause is the runtime's state, and what
// Resume needs (when the pause began, whether the clock stopped) is in the session's
// host directory, so a handle from Attach sees the session paused and resumes it.
type PausableSession interface {
	// Pause freezes the sandbox. Pausing a paused session is no error (and does not
	// change its options). Errors wrap ErrClosed once the session has ended.
	Pause(ctx context.Context, opts PauseOptions) error
	// Resume thaws a paused sandbox (a running one is left as is) and, when the
	// pause stopped the clock, moves the deadline by the time paused. Errors wrap
	// ErrClosed once the session has ended.
	Resume(ctx context.Context) error
	// PauseState reports whether the session is paused, since when, and its current
	// deadline.
	PauseState() PauseState
}

// PauseOptions are the options of PausableSession.Pause.
type PauseOptions struct {
	// StopClock keeps the session's lifetime from running while it is paused: Resume
	// moves its deadline later by the time spent paused. The default (false) lets
	// the lifetime run: a session paused past its deadline is ended then.
	StopClock bool
}

// PauseState is a session's pause state.
type PauseState struct {
	// Paused reports whether the sandbox is frozen.
	Paused bool
	// Since is when the current pause began (zero when not paused).
	Since time.Time
	// StopClock is the current pause's option.
	StopClock bool
	// Deadline is when the session's lifetime ends now (moved by each resume of a
	// pause that stopped the clock).
	Deadline time.Time
	// PausedFor is the total time the session spent paused with the clock stopped
	// before the current pause (what its deadline was moved by).
	PausedFor time.Duration
}
