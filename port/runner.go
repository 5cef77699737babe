package port

import (
	"context"
)

// SandboxRunner runs one command to completion in a locked-down container.
//
// RunOnce validates spec (errors wrap ErrInvalidSpec; nothing is created), creates the
// container, runs it, collects its output and removes it on every path, including
// cancellation of ctx and a panic unwinding through the caller.
//
// A non-zero exit code is not an error. RunOnce returns a non-nil *RunResult whenever
// the container was created, together with a *RunError when the run did not complete:
// errors.Is(err, ErrTimeout), ErrOOMKilled, ErrContainerFailed or ErrInternal tell why.
// A daemon that cannot be reached gives an error wrapping ErrUnavailable.
type SandboxRunner interface {
	RunOnce(ctx context.Context, spec RunSpec) (*RunResult, error)
}
