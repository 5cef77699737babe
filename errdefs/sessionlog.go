package errdefs

import "errors"

// ErrLogCorrupt is the error of a session's output log whose header or counters do not
// hold together (not a log, another capacity, an end that went backwards): something
// other than the bridge wrote it.
var ErrLogCorrupt = errors.New("session log corrupt")
