package errdefs

import "errors"

// Sentinels of the git relay (port.RepoRelay).
var (
	// ErrRejected reports work of an agent refused by policy: an export whose commits,
	// paths, sizes or identities break a rule. The *port.RejectError that wraps it says
	// which rule and which path.
	ErrRejected = errors.New("rejected by policy")
	// ErrPermissionDenied reports a remote that refused the host's credentials.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrConflict reports a remote that refused an update because it would lose
	// commits (a non-fast-forward push, a branch that already exists).
	ErrConflict = errors.New("conflict")
)
