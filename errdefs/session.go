package errdefs

import "errors"

// Sentinels of long-running sandboxes (port.SessionRunner).
var (
	// ErrPaused reports an operation a paused session cannot serve (an exec, a dial):
	// its processes are frozen until Resume.
	ErrPaused = errors.New("session is paused")
)
