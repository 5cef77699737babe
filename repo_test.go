package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

type fakeRelay struct {
	commits []string
	pushErr error
	exports []port.ExportRequest
	pushes  []port.PushRequest
	ctxLive bool
}

func (f *fakeRelay) Clone(_ context.Context, req port.CloneRequest) (*port.Checkout, error) {
	if err := os.MkdirAll(filepath.Join(req.WorkspaceDir, ".git"), 0o755); err != nil {
		return nil, err
	}
	return &port.Checkout{URL: req.URL, Branch: "main", Base: strings.Repeat("a", 40), DefaultBranch: "main"}, nil
}

func (f *fakeRelay) Export(ctx context.Context, req port.ExportRequest) (*port.Export, error) {
	f.exports = append(f.exports, req)
	f.ctxLive = ctx.Err() == nil
	e := &port.Export{RunID: req.RunID, Checkout: req.Checkout, Commits: f.commits, Tip: req.Checkout.Base}
	if len(f.commits) > 0 {
		e.Tip, e.Bundle = f.commits[0], "/cache/artefacts/"+req.RunID+".bundle"
	}
	return e, nil
}

func (f *fakeRelay) Push(_ context.Context, req port.PushRequest) (*port.PushResult, error) {
	f.pushes = append(f.pushes, req)
	if f.pushErr != nil {
		return nil, &port.PushError{Branch: "agent/run-1", Bundle: req.Export.Bundle, Err: f.pushErr}
	}
	return &port.PushResult{URL: req.Export.Checkout.URL, Branch: "agent/" + req.Export.RunID, Tip: req.Export.Tip, Commits: req.Export.Commits}, nil
}

type fakePRs struct{ spec port.PullRequestSpec }

func (f *fakePRs) OpenPullRequest(_ context.Context, spec port.PullRequestSpec) (*port.PullRequest, error) {
	f.spec = spec
	return &port.PullRequest{Number: 1, URL: "https://github.com/acme/widgets/pull/1"}, nil
}

func repoRequest(t *testing.T) Request {
	req := request(t)
	req.Repo = &RepoRequest{URL: "https://git.example/acme/widgets.git"}
	return req
}

func TestRepoPushedAndPullRequestOpened(t *testing.T) {
	relay, prs := &fakeRelay{commits: []string{"c2", "c1"}}, &fakePRs{}
	s, err := New(&fakeRunner{res: &port.RunResult{}}, WithRepoRelay(relay), WithPullRequester(prs))
	if err != nil {
		t.Fatal(err)
	}
	req := repoRequest(t)
	req.Repo.PullRequest = &PullRequestRequest{Title: "Agent run"}
	res, err := s.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Repo
	if r == nil || r.Push == nil || r.Push.Branch != "agent/run-1" || r.Push.Tip != "c2" || len(r.Push.Commits) != 2 ||
		r.PullRequest == nil || r.PullRequest.URL != "https://github.com/acme/widgets/pull/1" || r.NotPushed != "" {
		t.Fatalf("repo result %+v", r)
	}
	if prs.spec.Head != "agent/run-1" || prs.spec.Base != "main" || prs.spec.Title != "Agent run" {
		t.Errorf("pull request %+v", prs.spec)
	}
	if relay.exports[0].Image != "img" || relay.exports[0].WorkspaceDir != req.WorkspaceDir {
		t.Errorf("export request %+v", relay.exports[0])
	}
	// The prompt stays out of the agent's commits.
	b, err := os.ReadFile(filepath.Join(req.WorkspaceDir, ".git", "info", "exclude"))
	if err != nil || !strings.Contains(string(b), "/"+DefaultMessagesFile+"\n") {
		t.Errorf("exclude = %q, %v", b, err)
	}
}

func TestRepoNotPushed(t *testing.T) {
	// No commits: nothing to push.
	relay := &fakeRelay{}
	s, _ := New(&fakeRunner{res: &port.RunResult{}}, WithRepoRelay(relay))
	res, err := s.Run(context.Background(), repoRequest(t))
	if err != nil || res.Repo.Push != nil || res.Repo.NotPushed != "no commits" || len(relay.pushes) != 0 {
		t.Errorf("no commits: err=%v repo=%+v", err, res.Repo)
	}
	// A failed run: exported (kept), not pushed, unless asked; exported with a live
	// context even when the run was cancelled.
	relay = &fakeRelay{commits: []string{"c1"}}
	failed := &fakeRunner{res: &port.RunResult{ExitCode: -1, ErrorCode: port.CodeTimeout}, err: &port.RunError{Code: port.CodeTimeout, Err: context.Canceled}}
	s, _ = New(failed, WithRepoRelay(relay))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err = s.Run(ctx, repoRequest(t))
	if !errors.Is(err, port.ErrTimeout) || res.Repo.Export == nil || res.Repo.Push != nil || len(relay.pushes) != 0 || !relay.ctxLive ||
		!strings.Contains(res.Repo.NotPushed, res.Repo.Export.Bundle) {
		t.Errorf("failed run: err=%v repo=%+v pushes=%d", err, res.Repo, len(relay.pushes))
	}
	req := repoRequest(t)
	req.Repo.PushFailedRuns = true
	if res, _ = s.Run(context.Background(), req); res.Repo.Push == nil {
		t.Errorf("PushFailedRuns: %+v", res.Repo)
	}
	// A failed push: a typed error naming the artefact; the export stays in the result.
	relay = &fakeRelay{commits: []string{"c1"}, pushErr: port.ErrPermissionDenied}
	s, _ = New(&fakeRunner{res: &port.RunResult{}}, WithRepoRelay(relay))
	res, err = s.Run(context.Background(), repoRequest(t))
	var pe *port.PushError
	if !errors.As(err, &pe) || !errors.Is(err, port.ErrPermissionDenied) || pe.Bundle == "" || !strings.Contains(err.Error(), pe.Bundle) ||
		res == nil || res.Repo.Export == nil || res.Repo.Export.Bundle != pe.Bundle {
		t.Errorf("failed push: err=%v repo=%+v", err, res)
	}
}

func TestRepoRequestValidated(t *testing.T) {
	s, _ := New(&fakeRunner{res: &port.RunResult{}})
	if _, err := s.Run(context.Background(), repoRequest(t)); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("no relay: %v", err)
	}
	s, _ = New(&fakeRunner{res: &port.RunResult{}}, WithRepoRelay(&fakeRelay{}))
	req := repoRequest(t)
	req.Repo.PullRequest = &PullRequestRequest{Title: "x"}
	if _, err := s.Run(context.Background(), req); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("pull request without a requester: %v", err)
	}
	req = repoRequest(t)
	req.Repo.URL = ""
	if _, err := s.Run(context.Background(), req); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("no URL: %v", err)
	}
	if _, err := New(&fakeRunner{}, WithRepoRelay(nil)); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("nil relay: %v", err)
	}
	if _, err := New(&fakeRunner{}, WithPullRequester(nil)); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("nil requester: %v", err)
	}
}
