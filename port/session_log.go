package port

import (
	"context"

	"github.com/agentsandbox/sandbox/errdefs"
)

// ErrLogCorrupt is the error of a session's output log that does not hold together
// (something in the sandbox wrote it out of turn): a reader stops there.
var ErrLogCorrupt = errdefs.ErrLogCorrupt

// LogStream names one of a session's output streams.
type LogStream int

// The streams of a session's main process.
const (
	LogStdout LogStream = 1
	LogStderr LogStream = 2
)

// String is "stdout" or "stderr".
func (s LogStream) String() string {
	switch s {
	case LogStdout:
		return "stdout"
	case LogStderr:
		return "stderr"
	}
	return "stream?"
}

// LogPosition is a point in a session's output: how many bytes of each stream came
// before it, counted from the session's start.
type LogPosition struct {
	Stdout, Stderr int64
}

// LogChunk is a piece of one stream of a session's output.
type LogChunk struct {
	Stream LogStream
	// Offset is where Data starts in the stream.
	Offset int64
	// Data is the output; the reader does not touch it again.
	Data []byte
	// Dropped counts the bytes of this stream just before Offset that the reader
	// never got: the session's log no longer held them (the reader was more than the
	// session's LogLimit behind, or started before what the log holds).
	Dropped int64
}

// FollowOptions says where a LogReader starts.
type FollowOptions struct {
	// From is the position to start at. The zero value is the session's start: what
	// the log still holds comes first, and what it no longer holds is counted as
	// Dropped.
	From LogPosition
	// Now starts at the log's end when Follow is called instead (From is ignored):
	// only output from then on.
	Now bool
}

// LogSnapshot is what a session's log holds at one moment.
type LogSnapshot struct {
	// Stdout and Stderr are the held bytes of each stream, at most the session's
	// LogLimit each.
	Stdout, Stderr []byte
	// Start is the position of their first bytes (what came before is no longer held);
	// End is the position after their last, where a Follow continues with no byte lost
	// or repeated.
	Start, End LogPosition
}

// LogReader follows a session's output. It is not safe for concurrent use; make one
// per reader.
type LogReader interface {
	// Next returns the next chunk of output, waiting until there is one. It returns
	// io.EOF once the session's process has exited and the reader has had all of its
	// output the log held; ctx's error when ctx ends (the reader can go on); ErrClosed
	// once the handle it came from stopped watching (Detach); ErrLogCorrupt when the
	// log does not hold together.
	Next(ctx context.Context) (LogChunk, error)
	// Position is where the reader is: after the last chunk Next returned. It may be
	// called while Next runs (to watch a reader's lag, say).
	Position() LogPosition
	// Close releases the reader.
	Close() error
}

// LogFollower is an optional capability of a Session (Docker's and containerd's
// sessions have it), found by type assertion: the main process's output, followed by
// any number of readers, from its start or from now or from a position, in this
// process or another. Every reader sees every byte: none takes output from another
// (a handle rebuilt by Attach, `sandboxctl logs --follow` and the host that started
// the session read the same log).
//
// The session's log holds the last LogLimit bytes of each stream on the host; the
// agent never waits for a reader. A reader that falls more than LogLimit behind
// loses the oldest bytes, and the next chunk's Dropped counts them exactly: the
// bound is the log, not the reader's memory (a reader holds one chunk at a time).
// Order between the two streams is not kept; within a stream it is.
type LogFollower interface {
	// Follow returns a reader of the session's output starting where opts says.
	// Errors wrap ErrClosed for a handle that no longer watches its session.
	Follow(ctx context.Context, opts FollowOptions) (LogReader, error)
	// LogSnapshot returns what the log holds now, and where it ends.
	LogSnapshot() (LogSnapshot, error)
}
