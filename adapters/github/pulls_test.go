package github_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/github"
	"github.com/agentsandbox/sandbox/adapters/github/githubtest"
	"github.com/agentsandbox/sandbox/port"
)

const token = "ghs_CANARYpulls0123456789abcdef"

func newPR(t *testing.T, tok string) (*github.PullRequester, *githubtest.Server) {
	t.Helper()
	fake := githubtest.NewServer(token, "acme/widgets")
	t.Cleanup(fake.Close)
	p, err := github.NewPullRequester(github.WithBaseURL(fake.URL), github.WithToken(func(_ context.Context, repo string) (string, error) {
		if repo != "acme/widgets" {
			return "", fmt.Errorf("no token for %s", repo)
		}
		return tok, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return p, fake
}

func TestOpenPullRequest(t *testing.T) {
	p, fake := newPR(t, token)
	spec := port.PullRequestSpec{URL: "https://github.com/acme/widgets.git", Head: "agent/run-1", Base: "main", Title: "Agent run run-1", Body: "3 commits", Draft: true}
	pr, err := p.OpenPullRequest(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Number != 1 || pr.URL != "https://github.com/acme/widgets/pull/1" {
		t.Fatalf("got %+v", pr)
	}
	want := githubtest.Pull{Repo: "acme/widgets", Number: 1, Title: "Agent run run-1", Head: "agent/run-1", Base: "main", Body: "3 commits", Draft: true}
	if got := fake.Pulls(); len(got) != 1 || got[0] != want {
		t.Fatalf("the fake has %+v, want %+v", got, want)
	}
	// The same head and base again: GitHub's 422 becomes ErrConflict.
	_, err = p.OpenPullRequest(context.Background(), spec)
	if !errors.Is(err, port.ErrConflict) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("duplicate: %v", err)
	}
}

func TestOpenPullRequestErrors(t *testing.T) {
	ctx := context.Background()
	bad, _ := newPR(t, "wrong-"+token)
	_, err := bad.OpenPullRequest(ctx, port.PullRequestSpec{URL: "https://github.com/acme/widgets", Head: "agent/x", Base: "main", Title: "t"})
	if !errors.Is(err, port.ErrPermissionDenied) || strings.Contains(err.Error(), token) {
		t.Fatalf("bad token: %v", err)
	}
	p, fake := newPR(t, token)
	_, err = p.OpenPullRequest(ctx, port.PullRequestSpec{URL: "https://github.com/acme/other", Head: "agent/x", Base: "main", Title: "t"})
	if err == nil || fake.Requests() != 0 {
		t.Fatalf("a repository without a token: %v (%d requests)", err, fake.Requests())
	}
	for _, spec := range []port.PullRequestSpec{
		{URL: "https://github.com/acme/widgets", Head: "main", Base: "main", Title: "t"},
		{URL: "https://github.com/acme/widgets", Head: "agent/x", Base: "main"},
		{URL: "https://github.com/widgets", Head: "agent/x", Base: "main", Title: "t"},
	} {
		if _, err := p.OpenPullRequest(ctx, spec); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%+v: %v, want ErrInvalidSpec", spec, err)
		}
	}
	if fake.Requests() != 0 {
		t.Fatalf("invalid specs reached the server %d times", fake.Requests())
	}
	// A repository GitHub does not know is its 404.
	fake2 := githubtest.NewServer(token, "acme/widgets")
	defer fake2.Close()
	p2, _ := github.NewPullRequester(github.WithBaseURL(fake2.URL), github.WithToken(func(context.Context, string) (string, error) { return token, nil }))
	_, err = p2.OpenPullRequest(ctx, port.PullRequestSpec{URL: "https://github.com/acme/nope", Head: "agent/x", Base: "main", Title: "t"})
	if !errors.Is(err, port.ErrNotFound) {
		t.Fatalf("unknown repository: %v, want ErrNotFound", err)
	}
}
