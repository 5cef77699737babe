package port

import (
	"context"
	"io"
	"io/fs"
	"net"
	"time"
)

// SessionRunner is an optional capability of a SandboxRunner, found by type assertion
// (as Nomad finds a driver's optional capabilities): long-running sandboxes, the session
// API users know from E2B and Daytona. A session has the same lockdown as RunOnce (the
// same spec conversion builds it) but outlives the call that starts it: the host execs
// more commands in it, reaches TCP ports it listens on (on its loopback) through unix
// sockets, moves files through its workspace, and stops it when done.
type SessionRunner interface {
	// Start validates spec (errors wrap ErrInvalidSpec; nothing is created), creates and
	// starts the sandbox and returns its handle once the process runs and every
	// exposed port's socket exists (an exposed port is reachable once the process
	// listens on it). On any error everything created is removed.
	Start(ctx context.Context, spec SessionSpec) (Session, error)
	// Attach rebuilds the handle of a running session from its ID (Session.ID), after
	// the host process that started it is gone. The sandbox's labels carry what the
	// handle needs. Errors wrap ErrNotFound for an ID that is not a session of this
	// runner's owner.
	Attach(ctx context.Context, id string) (Session, error)
}

// Defaults of a SessionSpec.
const (
	// DefaultSessionLifetime is a session's Limits.Timeout when the spec sets none: the
	// sandbox ends itself then, even if every host that knew of it is gone.
	DefaultSessionLifetime = 24 * time.Hour
	// DefaultLogLimit is the size of each of a session's stdout and stderr rings.
	DefaultLogLimit = 256 << 10
	// MaxExposedPorts bounds SessionSpec.Expose.
	MaxExposedPorts = 8
)

// SessionSpec describes a long-running sandbox.
type SessionSpec struct {
	// RunSpec is the sandbox, locked down exactly as a run. Limits.Timeout is the
	// session's lifetime (default DefaultSessionLifetime), enforced inside the sandbox
	// too; OutputLimit is ignored (see LogLimit).
	RunSpec
	// Expose lists loopback TCP ports inside the sandbox the host may reach, each
	// through a unix socket (Session.Expose). At most MaxExposedPorts.
	Expose []int
	// LogLimit is how many of the last bytes of each of stdout and stderr a session's
	// output log keeps (default DefaultLogLimit): the host's disk holds two files of
	// about this size per session, and a reader (LogFollower) may fall this far behind
	// before it misses bytes.
	LogLimit int
}

// WithDefaults returns a copy of s with zero fields set to their defaults.
func (s SessionSpec) WithDefaults() SessionSpec {
	if s.Limits.Timeout == 0 {
		s.Limits.Timeout = DefaultSessionLifetime
	}
	s.RunSpec = s.RunSpec.WithDefaults()
	if s.LogLimit == 0 {
		s.LogLimit = DefaultLogLimit
	}
	return s
}

// Validate checks a spec (after WithDefaults) without touching the runtime. Errors wrap
// ErrInvalidSpec.
func (s SessionSpec) Validate() error {
	if err := s.RunSpec.Validate(); err != nil {
		return err
	}
	if len(s.Expose) > MaxExposedPorts {
		return Invalidf("%d exposed ports, at most %d", len(s.Expose), MaxExposedPorts)
	}
	seen := map[int]bool{}
	for _, p := range s.Expose {
		if p < 1 || p > 65535 {
			return Invalidf("exposed port %d out of range [1, 65535]", p)
		}
		if seen[p] {
			return Invalidf("port %d exposed twice", p)
		}
		seen[p] = true
	}
	if s.LogLimit < 0 {
		return Invalidf("log limit %d is negative", s.LogLimit)
	}
	return nil
}

// Session is the handle of a long-running sandbox. Its methods are safe for concurrent
// use. A handle watches its sandbox until Stop or Detach; it also refreshes the
// session's heartbeat (see Heartbeat), so a Sweep leaves a session alone while some
// host holds a handle to it.
type Session interface {
	// ID identifies the session to Attach (the container ID).
	ID() string
	// RunID is the spec's RunID.
	RunID() string
	// Done is closed when the sandbox's process has exited (or the handle was detached).
	Done() <-chan struct{}
	// Wait blocks until the process exits or ctx ends. Its result and error are what
	// RunOnce reports: the exit code, what the output log holds as Stdout and Stderr
	// (truncated flags and StdoutDropped, StderrDropped saying how many bytes came
	// before), the Duration from creation to exit, and a *RunError for a session that did not
	// complete (timeout at its lifetime, oom_killed, container_failed). A ctx that
	// ends gives ctx's error and no result; a detached handle gives ErrClosed.
	Wait(ctx context.Context) (*RunResult, error)
	// Stop ends the session: SIGTERM to its process, SIGKILL after grace, then removes
	// the sandbox and its host directory. It returns the exit result as Wait does (a
	// session stopped by the host is not a failure: no RunError unless it had already
	// failed). Stopping a stopped session returns the same result.
	Stop(ctx context.Context, grace time.Duration) (*RunResult, error)
	// Detach releases the handle without stopping the sandbox (for a later Attach).
	// The heartbeat stops with it.
	Detach() error
	// Logs returns what the session's output log holds: the last LogLimit bytes of
	// stdout and stderr (a handle rebuilt by Attach reads the same log). Runners whose
	// sessions implement LogFollower also give readers that follow it.
	Logs() (stdout, stderr []byte)
	// Expose returns the host path of the unix socket that reaches port on the
	// sandbox's loopback. The directory holding it is writable by the sandbox: dial
	// with Dial, which never follows a link the sandbox planted. Errors wrap
	// ErrNotFound for a port the spec did not expose.
	Expose(port int) (string, error)
	// Dial connects to port on the sandbox's loopback through its socket, refusing
	// anything at the socket's path that is not a socket (a symbolic link, say).
	Dial(ctx context.Context, port int) (net.Conn, error)
	// Exec runs another command in the sandbox, as the session's user with the same
	// lockdown, and waits for it. A non-zero exit is not an error; a timeout is a
	// *RunError with CodeTimeout (with the partial result). Errors wrap ErrClosed once
	// the session has ended.
	Exec(ctx context.Context, spec ExecSpec) (*ExecResult, error)
	// ReadFile reads name (a path relative to the workspace) without following any
	// symbolic link out of it, and only a regular file; at most max bytes
	// (DefaultMaxReadFile when max is not positive; ErrInvalidSpec beyond).
	ReadFile(name string, max int64) ([]byte, error)
	// WriteFile writes data to name (relative to the workspace), creating parent
	// directories, never following a symbolic link out of the workspace.
	WriteFile(name string, data []byte, perm fs.FileMode) error
	// Heartbeat records that a host still cares about the session now; Sweep measures
	// its grace period from the last heartbeat rather than from creation.
	Heartbeat() error
}

// DefaultMaxReadFile caps Session.ReadFile when the caller gives no cap: the
// workspace is the agent's, and a file in it can be as large as its disk.
const DefaultMaxReadFile = 64 << 20

// ExecSpec describes a command run in a session.
type ExecSpec struct {
	// Argv is the command (required), passed as an argv, never joined into a string.
	Argv []string
	// Env is added to the session's environment (the session's values are kept unless
	// Env sets the same key). The library's own variables (IsLibraryEnv) are refused:
	// they win over the caller's here as in RunSpec.SandboxEnv.
	Env map[string]string
	// Dir is the working directory inside the sandbox (default the workspace, if any).
	Dir string
	// Timeout bounds the command (default DefaultTimeout, and never past the session).
	Timeout time.Duration
	// OutputLimit caps each of stdout and stderr as kept in the result (default
	// DefaultOutputLimit).
	OutputLimit int
	// Stdout and Stderr, if set, also receive the output live (uncapped).
	Stdout, Stderr io.Writer
}

// ExecResult is the outcome of an Exec.
type ExecResult struct {
	ExitCode                         int
	Stdout, Stderr                   []byte
	StdoutTruncated, StderrTruncated bool
	Duration                         time.Duration
}

// WithDefaults returns a copy of e with zero fields set to their defaults.
func (e ExecSpec) WithDefaults() ExecSpec {
	if e.Timeout == 0 {
		e.Timeout = DefaultTimeout
	}
	if e.OutputLimit == 0 {
		e.OutputLimit = DefaultOutputLimit
	}
	return e
}

// Validate checks an ExecSpec (after WithDefaults). Errors wrap ErrInvalidSpec.
func (e ExecSpec) Validate() error {
	if len(e.Argv) == 0 || e.Argv[0] == "" {
		return Invalidf("exec: no command given")
	}
	for i, a := range e.Argv {
		if containsNUL(a) {
			return Invalidf("exec: argv[%d] contains a NUL byte", i)
		}
	}
	for k, v := range e.Env {
		if !envKeyRe.MatchString(k) {
			return Invalidf("exec: env key %q is not a valid variable name", k)
		}
		if IsLibraryEnv(k) {
			return Invalidf("exec: env %s is set by the library and cannot be overridden", k)
		}
		if containsNUL(v) {
			return Invalidf("exec: env %s contains a NUL byte", k)
		}
	}
	if e.Dir != "" && (e.Dir[0] != '/' || containsNUL(e.Dir)) {
		return Invalidf("exec: dir %q is not an absolute path", e.Dir)
	}
	if e.Timeout < 0 || e.OutputLimit < 0 {
		return Invalidf("exec: negative timeout or output limit")
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// Reserved labels of a session's sandbox (besides the usual ones; LabelKind is
// KindSession).
const (
	// LabelSessionDir is the session's host directory (its exposed sockets, its
	// heartbeat). Adapters act on it only when it lies under their own session root.
	LabelSessionDir = LabelPrefix + "session-dir"
	// LabelExpose lists the exposed ports, comma-separated.
	LabelExpose = LabelPrefix + "expose"
	// LabelLogLimit is the session's LogLimit.
	LabelLogLimit = LabelPrefix + "log-limit"
	// LabelDeadline is when the session's lifetime ends, RFC 3339 in UTC.
	LabelDeadline = LabelPrefix + "deadline"
	// LabelUser is the session's uid:gid (execs run as it).
	LabelUser = LabelPrefix + "user"
	// LabelWorkspace is the session's host workspace directory (for files in and out).
	LabelWorkspace = LabelPrefix + "workspace"
)

// KindSession is the LabelKind of a session's sandbox.
const KindSession = "session"
