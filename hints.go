package sandbox

import (
	"errors"
	"strings"

	"github.com/agentsandbox/sandbox/port"
)

// Errors with their fix: every sentinel the facade can return (Open, Run, Start,
// Session.Stop, LoadImage) comes with a hint saying what to do about it, appended
// to the message once ("...; hint: ..."). errors.Is and errors.As see through it.

// hints are the fixes, most specific sentinel first: errors.Is(err,
// port.ErrImageNotFound) also holds for port.ErrNotFound.
var hints = []struct {
	err  error
	hint string
}{
	{port.ErrImageNotFound, "load the image into the runtime (Sandbox.LoadImage) or give the runner a pull policy that fetches it (port.PullIfNotPresent)"},
	{ErrNotPermitted, "the host's own policy must grant the run (Request.Grant.AllowSandbox); with RequireAttestation, Result.Attestation.Violations says what the sandbox reported"},
	{port.ErrInvalidSpec, "change the field or option the message names; nothing was started"},
	{port.ErrUnsupported, "the part named (runtime or proxy manager) declares it cannot do this: drop the field, or use a part that can (the README's adapter table)"},
	{port.ErrUnavailable, "a service did not answer: `sandboxctl doctor` checks the runtimes; LITELLM_URL names LiteLLM"},
	{port.ErrTimeout, "raise Request.Limits.Timeout or the context's deadline; Result.Run has the output so far"},
	{port.ErrOOMKilled, "raise Request.Limits.MemoryBytes; Result.Run.Memory shows the pressure"},
	{port.ErrContainerFailed, "the runtime could not create or start the sandbox: Result.Run.Stderr and the message say why (Argv[0] missing from the image, a runtime refusing the spec)"},
	{port.ErrRemoved, "another process removed the sandbox (a Sweep): give each host its own owner (sandbox.WithOwner, the runners' WithOwner)"},
	{port.ErrBudgetExceeded, "raise Request.Budget, or leave out FailOnBudget and let the agent handle the refused calls (Result.Policy lists them)"},
	{port.ErrUnattributed, "LiteLLM had not written these calls' spend rows yet: raise WithReconcileTimeout (LiteLLM writes every 10 to 60 s) or reconcile later with the audit's call IDs"},
	{port.ErrDigestMismatch, "the tag now names other content than the pinned digest: fix the reference"},
	{port.ErrRejected, "the agent's commits broke RepoRequest.Policy: the *port.RejectError names the rule and the path; the artefact stays on disk"},
	{port.ErrPermissionDenied, "the remote refused the relay's credentials: check the token and its scope"},
	{port.ErrConflict, "the remote branch exists or moved: choose another RepoRequest.PushBranch"},
	{port.ErrPaused, "the session is paused (Session.Pause): Session.Resume it first; its files, logs and Wait work while it is paused"},
	{port.ErrLogCorrupt, "the session's log was written out of turn (its files belong to the sandbox's user, so the agent can): its output cannot be read from there; Session.Wait and Stop still give the exit code"},
	{port.ErrClosed, "the Sandbox, session or runner was closed: open a new one"},
	{port.ErrNotFound, "it is gone: a session stopped, a workspace or sandbox swept (check the run ID and owner)"},
	{port.ErrInternal, "a fault of the library or its backend: the message has the cause; report it with the logs (WithLogger)"},
}

// Hint returns what to do about err: the fix for the first sentinel it wraps, ""
// for an error that wraps none.
func Hint(err error) string {
	for _, h := range hints {
		if errors.Is(err, h.err) {
			return h.hint
		}
	}
	return ""
}

// hintedError is an error with its hint in its message.
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return e.err.Error() + "; hint: " + e.hint }
func (e *hintedError) Unwrap() error { return e.err }

// withHint adds err's hint to its message, once.
func withHint(err error) error {
	if err == nil {
		return nil
	}
	var he *hintedError
	if errors.As(err, &he) || strings.Contains(err.Error(), "; hint: ") {
		return err
	}
	if h := Hint(err); h != "" {
		return &hintedError{err: err, hint: h}
	}
	return err
}
