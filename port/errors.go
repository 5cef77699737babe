package port

import "github.com/agentsandbox/sandbox/errdefs"

// Sentinel errors, re-exported from errdefs so code written against the ports needs
// one import. Each is the same value as its errdefs namesake.
var (
	// ErrInvalidSpec reports input rejected before any resource was created.
	ErrInvalidSpec = errdefs.ErrInvalidSpec
	// ErrNotFound reports a missing resource (image, container, volume, run).
	ErrNotFound = errdefs.ErrNotFound
	// ErrUnavailable reports that a backing service (daemon, proxy, LiteLLM) could not be reached.
	ErrUnavailable = errdefs.ErrUnavailable
	// ErrUnsupported reports a capability the adapter does not have.
	ErrUnsupported = errdefs.ErrUnsupported
	// ErrClosed reports use of a resource after it was stopped or closed.
	ErrClosed = errdefs.ErrClosed

	// ErrTimeout reports a run killed because its time limit or context ended.
	ErrTimeout = errdefs.ErrTimeout
	// ErrOOMKilled reports a run killed by the kernel for exceeding its memory limit.
	ErrOOMKilled = errdefs.ErrOOMKilled
	// ErrContainerFailed reports a container that could not be created or started.
	ErrContainerFailed = errdefs.ErrContainerFailed
	// ErrInternal reports any other failure of the adapter or its backend.
	ErrInternal = errdefs.ErrInternal
	// ErrRemoved reports a run whose sandbox someone else removed while it ran, or
	// after it was created and before it ran.
	ErrRemoved = errdefs.ErrRemoved

	// ErrBudgetExceeded reports a per-run LLM call or token budget that was used up.
	ErrBudgetExceeded = errdefs.ErrBudgetExceeded
	// ErrUnattributed reports audited LLM calls that could not be matched to billing rows.
	ErrUnattributed = errdefs.ErrUnattributed
)

// OpError records a failed operation of an adapter; see errdefs.OpError.
type OpError = errdefs.OpError

// Invalidf returns an error wrapping ErrInvalidSpec with a formatted reason.
func Invalidf(format string, args ...any) error { return errdefs.Invalidf(format, args...) }

// EntrypointError reports a run whose agent entrypoint does not exist in its
// sandbox's pre-booted runtime (RunSpec.Preload): nothing of the run ran. It matches
// ErrNotFound with errors.Is; the run's error also carries CodeContainerFailed.
type EntrypointError struct {
	// Entry is the entrypoint the run named, as the runtime resolved it.
	Entry string
	// Reason is the runtime's own words.
	Reason string
}

func (e *EntrypointError) Error() string {
	return "the pre-booted runtime has no entrypoint " + e.Entry + ": " + e.Reason
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *EntrypointError) Is(target error) bool { return target == ErrNotFound }
