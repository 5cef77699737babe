package port

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentsandbox/sandbox/errdefs"
)

// Sentinels of the git relay, re-exported from errdefs.
var (
	// ErrRejected reports an export refused by policy; see RejectError.
	ErrRejected = errdefs.ErrRejected
	// ErrPermissionDenied reports a remote that refused the host's credentials.
	ErrPermissionDenied = errdefs.ErrPermissionDenied
	// ErrConflict reports a remote that refused an update (non-fast-forward).
	ErrConflict = errdefs.ErrConflict
)

// DefaultBranchPrefix is the prefix of the branches a relay pushes; the branch of a run
// is DefaultBranchPrefix + runID unless the request names another under the prefix.
const DefaultBranchPrefix = "agent/"

// RepoRelay moves an agent's work between a git remote and a sandbox without the
// sandbox ever holding a credential (seed 001, decision 6 HOST_SIDE_CLONE).
//
// The host clones into the workspace before the run (Clone), exports the run's
// commits after it (Export: the agent-written .git is read only inside a sandbox, and
// the host ingests one artefact into its own repository and validates it), and pushes
// a branch (Push). Nothing is pushed by Clone or Export; a pull request is a separate,
// explicit step (PullRequester).
type RepoRelay interface {
	// Clone fetches the remote into the host's mirror cache and clones the branch into
	// req.WorkspaceDir, which must be an empty directory. The workspace gets no hard
	// link into the cache, no submodule, no hook, and a remote URL without
	// credentials. The returned Checkout records the base commit as the host saw it;
	// it is never read back from the workspace. Errors: ErrInvalidSpec (request,
	// workspace not empty), ErrPermissionDenied, ErrUnavailable, ErrNotFound (branch).
	Clone(ctx context.Context, req CloneRequest) (*Checkout, error)
	// Export reads the commits the agent made on the checkout's branch in a sandbox and
	// validates them on the host against req.Policy. A branch still at the base gives
	// an Export with no commits. A refused export is a *RejectError (ErrRejected);
	// the sandbox failing wraps the run's sentinel (ErrTimeout, ErrOOMKilled, ...).
	Export(ctx context.Context, req ExportRequest) (*Export, error)
	// Push validates the export's artefact again and pushes it to a branch under the
	// policy's prefix: never the remote's default branch or the base branch, never
	// forced unless the policy allows it. Errors: *RejectError, ErrPermissionDenied
	// (credentials refused), ErrConflict (non-fast-forward), ErrUnavailable (remote
	// down), each in a *PushError naming the artefact, which stays on disk.
	Push(ctx context.Context, req PushRequest) (*PushResult, error)
}

// CloneRequest says what to clone where.
type CloneRequest struct {
	// RunID is the host-generated run the workspace belongs to.
	RunID string
	// URL is the remote, http or https, without credentials (those come from the
	// adapter's credential source).
	URL string
	// Branch is the branch to clone; empty means the remote's default branch.
	Branch string
	// WorkspaceDir is the run's workspace on the host: an existing empty directory.
	WorkspaceDir string
}

// Checkout is what the host recorded at clone time. It is host state: pass it back to
// Export and Push unchanged.
type Checkout struct {
	// URL is the remote (credential-free).
	URL string
	// Branch is the branch checked out in the workspace; the agent commits on it.
	Branch string
	// Base is the commit the workspace was cloned at (40 hex digits).
	Base string
	// DefaultBranch is the remote's default branch when the clone was made.
	DefaultBranch string
}

// ExportRequest says which run's commits to export.
type ExportRequest struct {
	// RunID is the run whose workspace is exported.
	RunID string
	// Checkout is what Clone returned for this workspace.
	Checkout Checkout
	// WorkspaceDir is the run's workspace; it is mounted read-only into the export
	// sandbox and never read by the host.
	WorkspaceDir string
	// Image is the image the exporter runs in (a static binary the adapter mounts;
	// the image only needs to start it: the agent's own image does).
	Image string
	// Policy is checked on the host; zero fields take the defaults.
	Policy RepoPolicy
}

// Export is the run's validated work: a git bundle on the host holding exactly the
// commits Base..Tip of the checkout's branch.
type Export struct {
	// RunID and Checkout are the request's.
	RunID    string
	Checkout Checkout
	// Bundle is the host path of the artefact (empty when there are no commits). It is
	// kept until the caller removes it, so a failed push loses nothing:
	// `git fetch BUNDLE refs/heads/BRANCH` recovers the commits.
	Bundle string
	// Tip is the branch's last commit (Base when the agent made none).
	Tip string
	// Commits are the new commits, newest first.
	Commits []string
}

// Empty reports whether the agent made no commits.
func (e *Export) Empty() bool { return e == nil || len(e.Commits) == 0 }

// PushRequest says where to push an export.
type PushRequest struct {
	// Export is what Export returned; its artefact is validated again under Policy.
	Export Export
	// Branch is the remote branch; empty means Policy.BranchPrefix + RunID. It must
	// start with the prefix.
	Branch string
	// Force replaces the remote branch even if that loses commits; refused unless
	// Policy.AllowForce.
	Force bool
	// Policy is checked again on the artefact; zero fields take the defaults.
	Policy RepoPolicy
}

// PushResult says what was pushed.
type PushResult struct {
	URL     string   // the remote (credential-free)
	Branch  string   // the remote branch, without refs/heads/
	Tip     string   // the commit the branch now points at
	Commits []string // the pushed commits, newest first
}

// PushError is a push that failed after validation. The artefact is untouched.
type PushError struct {
	Branch string // the remote branch the push was for
	Bundle string // the export's artefact, still on disk
	Err    error  // wraps ErrPermissionDenied, ErrConflict, ErrUnavailable, ErrNotFound, ErrRejected or ErrInternal
	// Status is the HTTP status the remote refused the push with (0 when it did not
	// answer with one): 401/403 wrap ErrPermissionDenied, 404 ErrNotFound, 409
	// ErrConflict, 5xx ErrUnavailable, any other 4xx ErrRejected.
	Status int
}

// Error implements error. It never contains a credential.
func (e *PushError) Error() string {
	return fmt.Sprintf("push to %s failed (commits kept in %s): %v", e.Branch, e.Bundle, e.Err)
}

// Unwrap returns the cause.
func (e *PushError) Unwrap() error { return e.Err }

// RepoPolicy bounds what an agent's commits may contain. Zero fields take defaults.
type RepoPolicy struct {
	MaxCommits     int   // default 100
	MaxFileBytes   int64 // largest blob; default 10 MiB
	MaxTotalBytes  int64 // all new objects, uncompressed; default 100 MiB
	MaxBundleBytes int64 // the artefact file; default MaxTotalBytes
	// DenyPaths are patterns of paths the agent may not add, change or delete, with
	// "*" matching within one path element and "**" any number of them, e.g.
	// ".github/workflows/**".
	DenyPaths []string
	// NoSubmodules refuses gitlinks and any change to .gitmodules.
	NoSubmodules bool
	// Identity rules authors and committers.
	Identity IdentityPolicy
	// BranchPrefix is where pushes go; default DefaultBranchPrefix. It must end in "/".
	BranchPrefix string
	// AllowForce lets PushRequest.Force replace a branch under BranchPrefix.
	AllowForce bool
}

// IdentityPolicy says which author and committer identities commits may carry.
type IdentityPolicy struct {
	// AllowedEmails, if set, are patterns ("*" matches any run of characters) that every
	// author and committer email must match; others are refused (RuleIdentity).
	AllowedEmails []string
	// Rewrite, if set, replaces every author and committer name and email of the new
	// commits (times and messages are kept); the commits get new ids. AllowedEmails is
	// then not checked.
	Rewrite *Identity
}

// Identity is a git name and email.
type Identity struct{ Name, Email string }

// RunIdentity is the identity a run's commits are rewritten to by default (see
// IdentityPolicy.Rewrite): "agent <run id>" <run-id@agents.invalid> (.invalid never
// resolves, so the address can belong to no one).
func RunIdentity(runID string) Identity {
	return Identity{Name: "agent " + runID, Email: runID + "@agents.invalid"}
}

// WithDefaults returns p with zero fields set.
func (p RepoPolicy) WithDefaults() RepoPolicy {
	if p.MaxCommits == 0 {
		p.MaxCommits = 100
	}
	if p.MaxFileBytes == 0 {
		p.MaxFileBytes = 10 << 20
	}
	if p.MaxTotalBytes == 0 {
		p.MaxTotalBytes = 100 << 20
	}
	if p.MaxBundleBytes == 0 {
		p.MaxBundleBytes = p.MaxTotalBytes
	}
	if p.BranchPrefix == "" {
		p.BranchPrefix = DefaultBranchPrefix
	}
	return p
}

// Rule names the policy rule an export broke.
type Rule string

// Rules a RejectError reports.
const (
	RuleLayout      Rule = "layout"       // the workspace has no usable repository or the artefact is malformed
	RuleBranch      Rule = "branch"       // the expected branch is missing, or another ref was exported
	RuleAncestry    Rule = "ancestry"     // a commit does not descend from the base
	RuleCommitCount Rule = "commit-count" // too many commits
	RuleFileSize    Rule = "file-size"    // a blob over MaxFileBytes
	RuleTotalSize   Rule = "total-size"   // new objects or the artefact over their caps
	RulePath        Rule = "path"         // "..", ".", ".git", an absolute or empty path element
	RuleDenied      Rule = "denied-path"  // a path matching DenyPaths
	RuleSymlink     Rule = "symlink"      // a symlink pointing outside the repository
	RuleSubmodule   Rule = "submodule"    // a gitlink or .gitmodules change under NoSubmodules
	RuleIdentity    Rule = "identity"     // an author or committer email not allowed
	RuleObject      Rule = "object"       // a malformed object (git fsck refused it)
	RulePushBranch  Rule = "push-branch"  // the push target is not allowed
)

// RejectError is an export or push refused by policy. It wraps ErrRejected.
type RejectError struct {
	Rule   Rule   // the rule broken
	Path   string // the offending path, if the rule is about one
	Commit string // the offending commit or object, if known
	Detail string // what was found, for people; never a credential
}

// Error implements error. Path, Commit and Detail may carry bytes an agent chose:
// they are spelled with EscapeText.
func (e *RejectError) Error() string {
	s := "rejected (" + string(e.Rule) + ")"
	if e.Path != "" {
		s += fmt.Sprintf(" path %q", e.Path)
	}
	if e.Commit != "" {
		s += " in " + EscapeText(e.Commit)
	}
	if e.Detail != "" {
		s += ": " + EscapeText(e.Detail)
	}
	return s
}

// EscapeText spells untrusted text (a path, a ref, a message an agent's program
// wrote) for an error or a log line so that every byte shows as what it is: control
// characters (C0, DEL and C1), format characters (bidirectional overrides and
// isolates such as U+202E, zero-width marks), every other rune that does not print,
// and bytes that are not UTF-8 become \xNN, \uNNNN or \UNNNNNNNN. Printable text is
// unchanged (so escaping twice changes nothing more).
func EscapeText(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		case r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

// Unwrap returns ErrRejected.
func (e *RejectError) Unwrap() error { return ErrRejected }

// PullRequester opens pull requests. It is separate from RepoRelay on purpose (seed 001
// invariant WRITE_PATH_IS_BRANCH): a run pushes a branch; a pull request is opened only
// when the host asks for one.
type PullRequester interface {
	// OpenPullRequest opens a pull request from spec.Head into spec.Base. Errors:
	// ErrInvalidSpec, ErrPermissionDenied, ErrConflict (one exists already),
	// ErrNotFound (repository or branch), ErrUnavailable.
	OpenPullRequest(ctx context.Context, spec PullRequestSpec) (*PullRequest, error)
}

// PullRequestSpec describes a pull request.
type PullRequestSpec struct {
	// URL is the repository's clone URL (e.g. https://github.com/OWNER/REPO.git).
	URL   string
	Head  string // the pushed branch
	Base  string // the branch to merge into (the checkout's branch)
	Title string
	Body  string
	Draft bool
}

// PullRequest is an opened pull request.
type PullRequest struct {
	Number int    // the pull request's number in its repository
	URL    string // the web page
}
