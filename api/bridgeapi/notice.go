package bridgeapi

import (
	"bytes"
	"errors"
	"strings"
)

// What the bridge tells its host on the command's output streams. The bridge writes
// these lines; a runner reads them from the end of a sandbox's stderr (or from a
// session's streams) and takes them out of what it returns.

// OOMNotice is the line the bridge writes to the command's stderr, after everything
// the command wrote, when the kernel's OOM killer ended the command: the sandbox's
// memory cgroup counted an OOM kill during the run. A runner whose runtime reports
// OOM kills only through an event that can arrive late or never (Docker's) reads it
// from the end of stderr and removes it. The agent could print it too, but only to
// misreport its own run as OOM-killed.
const OOMNotice = "\nsandbox-bridge: the agent was killed by the kernel's OOM killer (memory limit reached)\n"

// ExecFailedPrefix starts the last line the bridge writes to stderr when it could not
// start the command (exit code ExitCannotExec or ExitNotFound): the runtime started
// the sandbox, but the agent never ran, which runners report as a container failure,
// as they do when the runtime itself cannot exec the entrypoint. The line goes on
// with the error (ErrCommandNotFound or ErrCannotExec, and the details).
const ExecFailedPrefix = "sandbox-bridge: cannot start the command: "

// Errors of the bridge whose texts reach the host on stderr (after ExecFailedPrefix,
// or in the line that says a deadline stopped the command), for errors.Is in the
// bridge and for MissingEntry and runners on the host.
var (
	// ErrCommandNotFound reports an argv[0] that does not exist (exit code 127).
	ErrCommandNotFound = errors.New("bridge: command not found")
	// ErrCannotExec reports an argv[0] that exists but cannot be executed (exit code 126).
	ErrCannotExec = errors.New("bridge: command cannot be executed")
	// ErrDeadline reports a command ended because the sandbox's deadline (the
	// -deadline flag, Claim.DeadlineMS) passed.
	ErrDeadline = errors.New("bridge: the sandbox's deadline passed")
)

// ExecFailure returns the reason from an ExecFailedPrefix line at the end of tail (the
// end of a sandbox's stderr).
func ExecFailure(tail []byte) (string, bool) {
	reason, ok := bytes.CutPrefix(lastLine(tail), []byte(ExecFailedPrefix))
	return string(reason), ok
}

// MissingEntry returns the entrypoint an ExecFailure reason says the preloaded
// runtime did not have ("bridge: command not found: ENTRY: ...").
func MissingEntry(reason string) (string, bool) {
	rest, ok := strings.CutPrefix(reason, ErrCommandNotFound.Error()+": ")
	if !ok {
		return "", false
	}
	entry, _, _ := strings.Cut(rest, ": ")
	return entry, entry != ""
}

// PreloadGoneIn reports whether tail (the end of a stub's stderr) says its preloaded
// runtime was gone at the claim (a PreloadGone line): nothing of the run ran.
func PreloadGoneIn(tail []byte) (string, bool) {
	return strings.CutPrefix(string(lastLine(tail)), PreloadGone)
}

// lastLine is the last line of b, without its newline.
func lastLine(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte{'\n'})
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return b
}

// DroppedNotice starts the line the bridge writes on a stream whose output it passes
// through (the -output-cap flag) when it can write again after it dropped output: the
// line goes on with the count, the stream's name and why.
const DroppedNotice = "[sandbox-bridge] dropped "

// OutputMark starts the mark the bridge writes in a stream every so many bytes of the
// command's output (the -output-marks flag): OutputMark, the number of bytes the
// command wrote on that stream before the mark (in decimal), then a NUL. A host that
// reads the stream from a log the runtime rotates (Docker's json-file) learns from the
// next mark how many bytes it never received, and takes the marks out.
const OutputMark = "\x00[sandbox-bridge] offset "
