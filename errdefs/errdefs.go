// Package errdefs holds the error vocabulary every package of the module shares: the
// sentinels callers branch on with errors.Is, the *OpError that names a failed
// operation, and Invalidf for input refused at a boundary.
//
// It imports nothing but the standard library, so clients such as litellm and
// openclaw/gateway classify their errors without depending on the ports (the way
// containerd's errdefs serves its client). The port package re-exports these names.
package errdefs

import (
	"errors"
	"fmt"
)

// Sentinel errors. Packages wrap them (usually inside an *OpError) so callers can
// branch with errors.Is without knowing which adapter or client produced them.
var (
	// ErrInvalidSpec reports input rejected before any resource was created.
	ErrInvalidSpec = errors.New("invalid spec")
	// ErrNotFound reports a missing resource (image, container, volume, run).
	ErrNotFound = errors.New("not found")
	// ErrUnavailable reports that a backing service (daemon, proxy, LiteLLM) could not be reached.
	ErrUnavailable = errors.New("unavailable")
	// ErrUnsupported reports a capability the adapter does not have.
	ErrUnsupported = errors.New("unsupported")
	// ErrClosed reports use of a resource after it was stopped or closed.
	ErrClosed = errors.New("closed")

	// ErrTimeout reports a run killed because its time limit or context ended.
	ErrTimeout = errors.New("timeout")
	// ErrOOMKilled reports a run killed by the kernel for exceeding its memory limit.
	ErrOOMKilled = errors.New("oom killed")
	// ErrContainerFailed reports a container that could not be created or started
	// (missing image, bad entrypoint, runtime refusal).
	ErrContainerFailed = errors.New("container failed")
	// ErrInternal reports any other failure of an adapter or its backend.
	ErrInternal = errors.New("internal error")
	// ErrRemoved reports a run whose sandbox was removed while it ran by someone
	// else (another process's Sweep that did not see its lease, an operator).
	ErrRemoved = errors.New("sandbox removed by another process")

	// ErrBudgetExceeded reports a per-run LLM call or token budget that was used up.
	ErrBudgetExceeded = errors.New("budget exceeded")
	// ErrUnattributed reports audited LLM calls that could not be matched to billing rows.
	ErrUnattributed = errors.New("unattributed calls")
)

// OpError records a failed operation: which operation, on which run, and why. It
// unwraps to its cause, so errors.Is(err, ErrInvalidSpec) and friends work.
type OpError struct {
	// Op is the operation, e.g. "docker.RunOnce" or "inproc.Start".
	Op string
	// RunID is the run the operation was for, if any.
	RunID string
	// Err is the cause; it usually wraps one of the package sentinels.
	Err error
}

// Error implements error.
func (e *OpError) Error() string {
	if e.RunID != "" {
		return fmt.Sprintf("%s (run %s): %v", e.Op, e.RunID, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Invalidf returns an error wrapping ErrInvalidSpec with a formatted reason.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
}
