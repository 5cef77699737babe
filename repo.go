package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// DefaultRepoTimeout bounds a run's export, push and pull request (WithRepoRelay):
// they run with a fresh context, so a cancelled or timed-out run keeps its commits.
const DefaultRepoTimeout = 5 * time.Minute

// RepoRequest gives a run a git repository (WithRepoRelay): the host clones it into
// the run's empty workspace before the agent starts, and after the run exports the
// agent's commits (read from the workspace inside a sandbox, validated on the host
// against Policy) and pushes them to a branch. The sandbox never holds a credential.
type RepoRequest struct {
	// URL is the remote, http or https, without credentials (the relay has its own
	// credential source).
	URL string
	// Branch is the branch to clone and commit on; empty means the remote's default.
	Branch string
	// Policy bounds the agent's commits; zero fields take the defaults of
	// port.RepoPolicy.
	Policy port.RepoPolicy
	// PushBranch is the remote branch to push; empty means Policy.BranchPrefix (default
	// "agent/") + RunID. It must start with the prefix.
	PushBranch string
	// PushFailedRuns pushes the commits of a run that failed (a non-zero exit, a
	// timeout, a cancellation) too. By default such a run's commits are exported and
	// kept in the artefact (RepoResult.Export.Bundle), not pushed: an unfinished
	// change does not reach the remote unless the host says so.
	PushFailedRuns bool
	// PullRequest, if set, opens a pull request from the pushed branch into Branch
	// (the checkout's branch) through WithPullRequester. Without it, only a branch is
	// pushed.
	PullRequest *PullRequestRequest
	// ExportImage is the image the exporter runs in (it only has to start the
	// exporter, which is mounted); empty means the run's Image.
	ExportImage string
	// RewriteIdentity makes every pushed commit's author and committer the run's
	// identity (port.RunIdentity(RunID)) and drops signatures (gpgsig, mergetag), so
	// nothing the agent wrote into a commit header reaches the remote. Without it (and
	// without Policy.Identity), an agent's commits keep whatever author, committer and
	// signature it forged, byte for byte. Policy.Identity.Rewrite wins when set.
	RewriteIdentity bool
}

// PullRequestRequest describes the pull request to open after a push.
type PullRequestRequest struct {
	Title, Body string
	Draft       bool
}

// RepoResult is what became of a run's repository.
type RepoResult struct {
	// Checkout is what the host cloned: the remote, the branch and the base commit.
	Checkout port.Checkout
	// Export is the agent's validated work, nil when the export failed: the commits
	// (newest first), the tip and the artefact (a git bundle, kept on disk until the
	// caller removes it; `git fetch BUNDLE refs/heads/BRANCH` recovers the commits).
	Export *port.Export
	// Push says what was pushed: the remote branch, its tip and the commits; nil when
	// nothing was (no commits, a failed run, a refused export or a failed push).
	Push *port.PushResult
	// PullRequest is the opened pull request, when one was asked for and opened.
	PullRequest *port.PullRequest
	// NotPushed says why nothing was pushed, when nothing was: "no commits",
	// "the run failed", or the error's text.
	NotPushed string
}

// WithRepoRelay lets requests carry a repository (Request.Repo), moved between the
// remote and the sandbox by relay (adapters/gitcli). Export, push and pull request run
// after the run with a fresh context bounded by DefaultRepoTimeout.
func WithRepoRelay(relay port.RepoRelay) Option {
	return func(s *Sandbox) error {
		if relay == nil {
			return port.Invalidf("repo relay is nil")
		}
		s.relay = relay
		return nil
	}
}

// WithPullRequester opens the pull requests that requests ask for
// (RepoRequest.PullRequest), through prs (adapters/github).
func WithPullRequester(prs port.PullRequester) Option {
	return func(s *Sandbox) error {
		if prs == nil {
			return port.Invalidf("pull requester is nil")
		}
		s.prs = prs
		return nil
	}
}

// checkRepo validates a request's repository part before anything starts.
func (s *Sandbox) checkRepo(req Request) error {
	r := req.Repo
	if r == nil {
		return nil
	}
	if s.relay == nil {
		return port.Invalidf("a repository was asked for, but no repo relay is configured (WithRepoRelay)")
	}
	if r.PullRequest != nil && s.prs == nil {
		return port.Invalidf("a pull request was asked for, but no pull requester is configured (WithPullRequester)")
	}
	if r.URL == "" {
		return port.Invalidf("repo: URL is required")
	}
	return nil
}

// clone clones req's repository, if it names one, in a span of its own (nil without
// one).
func (s *Sandbox) clone(ctx context.Context, req Request) (repo *RepoResult, err error) {
	if req.Repo == nil {
		return nil, nil
	}
	err = s.traced(ctx, "sandbox.repo.clone", func(ctx context.Context) error {
		repo, err = s.cloneRepo(ctx, req)
		return err
	})
	return repo, err
}

// cloneRepo clones the request's repository into its (empty) workspace and keeps the
// messages file out of the agent's commits.
func (s *Sandbox) cloneRepo(ctx context.Context, req Request) (*RepoResult, error) {
	co, err := s.relay.Clone(ctx, port.CloneRequest{RunID: req.RunID, URL: req.Repo.URL, Branch: req.Repo.Branch, WorkspaceDir: req.WorkspaceDir})
	if err != nil {
		return nil, fmt.Errorf("repo: clone: %w", err)
	}
	if err := excludeFromGit(req.WorkspaceDir, s.messagesFile); err != nil {
		return nil, fmt.Errorf("repo: %w", err)
	}
	return &RepoResult{Checkout: *co}, nil
}

// excludeFromGit adds the messages file to the fresh clone's .git/info/exclude, so an
// agent committing everything does not commit its prompt. The clone is the host's
// own, made a moment ago; it is still written through the workspace root.
func excludeFromGit(workspace, file string) error {
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll(".git/info", 0o755); err != nil {
		return err
	}
	f, err := root.OpenFile(".git/info/exclude", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, werr := fmt.Fprintf(f, "/%s\n", path.Clean(file))
	return errors.Join(werr, f.Close())
}

// finishRepo exports the run's commits and, when the run succeeded (or the request
// allows failed runs), pushes them and opens the pull request asked for. It fills
// rr and returns the first error that lost the push.
func (s *Sandbox) finishRepo(ctx context.Context, req Request, run *port.RunResult, rr *RepoResult) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultRepoTimeout)
	defer cancel()
	r := *req.Repo
	if r.RewriteIdentity && r.Policy.Identity.Rewrite == nil {
		id := port.RunIdentity(req.RunID)
		r.Policy.Identity.Rewrite = &id
	}
	image := r.ExportImage
	if image == "" {
		image = req.Image
	}
	exp, err := s.relay.Export(ctx, port.ExportRequest{RunID: req.RunID, Checkout: rr.Checkout, WorkspaceDir: req.WorkspaceDir, Image: image, Policy: r.Policy})
	if err != nil {
		rr.NotPushed = "export failed: " + err.Error()
		return fmt.Errorf("repo: export: %w", err)
	}
	rr.Export = exp
	switch {
	case exp.Empty():
		rr.NotPushed = "no commits"
		return nil
	case !run.OK() && !r.PushFailedRuns:
		rr.NotPushed = "the run failed; its commits are kept in " + exp.Bundle
		return nil
	}
	pushed, err := s.relay.Push(ctx, port.PushRequest{Export: *exp, Branch: r.PushBranch, Policy: r.Policy})
	if err != nil {
		rr.NotPushed = err.Error()
		// A *port.PushError names the artefact; a refusal before the push does not,
		// so say where the commits are.
		var pe *port.PushError
		if !errors.As(err, &pe) {
			return fmt.Errorf("repo: push (commits kept in %s): %w", exp.Bundle, err)
		}
		return fmt.Errorf("repo: %w", err)
	}
	rr.Push = pushed
	if r.PullRequest == nil {
		return nil
	}
	pr, err := s.prs.OpenPullRequest(ctx, port.PullRequestSpec{
		URL: rr.Checkout.URL, Head: pushed.Branch, Base: rr.Checkout.Branch,
		Title: r.PullRequest.Title, Body: r.PullRequest.Body, Draft: r.PullRequest.Draft,
	})
	if err != nil {
		return fmt.Errorf("repo: pull request from %s: %w", pushed.Branch, err)
	}
	rr.PullRequest = pr
	return nil
}
