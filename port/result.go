package port

import (
	"fmt"
	"time"
)

// StartKind says how a run's sandbox was started.
type StartKind string

// Start kinds.
const (
	// StartCold: created for the run ("" means the same).
	StartCold StartKind = "cold"
	// StartWarm: a warm pool's pre-created sandbox.
	StartWarm StartKind = "warm"
	// StartPreloaded: a warm pool's sandbox whose agent runtime was pre-booted.
	StartPreloaded StartKind = "preloaded"
)

// RunResult is the outcome of a run.
type RunResult struct {
	// ExitCode is the process's exit code; -1 when it never ran or was killed before exit.
	ExitCode int
	// Stdout and Stderr are the captured streams, each at most OutputLimit bytes.
	Stdout, Stderr []byte
	// StdoutTruncated and StderrTruncated say whether output was dropped past the cap.
	StdoutTruncated, StderrTruncated bool
	// ErrorCode is empty for a completed run (whatever its exit code).
	ErrorCode ErrorCode
	// Duration is the wall-clock time from create to exit.
	Duration time.Duration
	// Start says how the sandbox was started ("" from runners that do not say: cold).
	Start StartKind
	// StartNote says why a run that asked for a pre-booted or pooled sandbox ran cold.
	StartNote string
	// PreloadAttestation is the isolation the sandbox's bridge reported before the
	// claim, once its pre-booted runtime was ready (StartPreloaded runs only).
	PreloadAttestation *Attestation
	// Memory is what the sandbox's memory cgroup said while it ran (see
	// MemoryPressure); nil where the runner cannot read it.
	Memory *MemoryPressure
	// StdoutDropped and StderrDropped count the bytes of a session's output that came
	// before Stdout and Stderr: its output log keeps the last LogLimit bytes of each
	// stream (see docs/sessions.md). Sessions only; runs count nothing here (their
	// caps show in StdoutTruncated and StderrTruncated).
	StdoutDropped, StderrDropped int64
}

// OK reports whether the run completed and exited 0.
func (r *RunResult) OK() bool { return r != nil && r.ErrorCode == "" && r.ExitCode == 0 }

// ErrorCode classifies a run that did not complete.
type ErrorCode string

// Error codes, matching the seed's SandboxRunResult.errorCode.
const (
	CodeTimeout         ErrorCode = "timeout"
	CodeOOMKilled       ErrorCode = "oom_killed"
	CodeContainerFailed ErrorCode = "container_failed"
	CodeInternal        ErrorCode = "internal"
)

// Sentinel returns the package sentinel for the code.
func (c ErrorCode) Sentinel() error {
	switch c {
	case CodeTimeout:
		return ErrTimeout
	case CodeOOMKilled:
		return ErrOOMKilled
	case CodeContainerFailed:
		return ErrContainerFailed
	default:
		return ErrInternal
	}
}

// RunError reports a run that did not complete. errors.Is matches the code's sentinel
// (ErrTimeout, ...) and the cause (context.Canceled, say).
type RunError struct {
	Code ErrorCode
	Err  error // the cause; may be nil
}

// Error implements error.
func (e *RunError) Error() string {
	if e.Err == nil {
		return string(e.Code)
	}
	return fmt.Sprintf("%s: %v", e.Code, e.Err)
}

// Unwrap returns the code's sentinel and the cause.
func (e *RunError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Code.Sentinel()}
	}
	return []error{e.Code.Sentinel(), e.Err}
}
