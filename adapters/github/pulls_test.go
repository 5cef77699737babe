package github_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/github"
	"github.com/agentsandbox/sandbox/port"
)

const token = "ghs_CANARYpulls0123456789abcdef"

// fakeGitHub is a fake of GitHub's pulls API: it checks the request shape and auth as
// GitHub documents them, keeps the opened pull requests, and answers 422 "A pull
// request already exists" for a second one with the same head and base.
type fakeGitHub struct {
	mu    sync.Mutex
	pulls []map[string]any
	seen  []*http.Request
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, r)
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request"})
	}
	if r.Header.Get("Authorization") != "Bearer "+token {
		fail(401, "Bad credentials")
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/repos/acme/widgets/pulls" {
		fail(404, "Not Found")
		return
	}
	if r.Header.Get("Accept") != "application/vnd.github+json" || r.Header.Get("X-GitHub-Api-Version") != "2022-11-28" || r.Header.Get("Content-Type") != "application/json" {
		fail(400, "bad headers")
		return
	}
	var body map[string]any
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil {
		fail(400, "Problems parsing JSON")
		return
	}
	for _, k := range []string{"title", "head", "base"} {
		if s, _ := body[k].(string); s == "" {
			fail(422, "Validation Failed")
			return
		}
	}
	for _, p := range f.pulls {
		if p["head"] == body["head"] && p["base"] == body["base"] {
			w.WriteHeader(422)
			fmt.Fprintf(w, `{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"A pull request already exists for acme:%s."}]}`, body["head"])
			return
		}
	}
	f.pulls = append(f.pulls, body)
	n := len(f.pulls)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(201)
	json.NewEncoder(w).Encode(map[string]any{"number": n, "html_url": fmt.Sprintf("https://github.com/acme/widgets/pull/%d", n), "state": "open", "draft": body["draft"]})
}

func newPR(t *testing.T, tok string) (*github.PullRequester, *fakeGitHub) {
	t.Helper()
	fake := &fakeGitHub{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	p, err := github.NewPullRequester(github.WithBaseURL(srv.URL), github.WithToken(func(_ context.Context, repo string) (string, error) {
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
	got := fake.pulls[0]
	if got["head"] != "agent/run-1" || got["base"] != "main" || got["title"] != "Agent run run-1" || got["body"] != "3 commits" || got["draft"] != true {
		t.Fatalf("request body %v", got)
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
	if err == nil || len(fake.seen) != 0 {
		t.Fatalf("a repository without a token: %v (%d requests)", err, len(fake.seen))
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
	if len(fake.seen) != 0 {
		t.Fatalf("invalid specs reached the server %d times", len(fake.seen))
	}
}
