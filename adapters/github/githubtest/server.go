// Package githubtest is a fake of GitHub's pulls API for tests, on loopback: it checks
// each request's shape and auth the way GitHub documents them (POST
// /repos/{owner}/{repo}/pulls, Bearer token, Accept and API-version headers, a JSON body
// with title, head and base), keeps the pull requests it opened, and answers GitHub's
// errors: 401 Bad credentials, 404, 422 Validation Failed, and 422 "A pull request
// already exists" for a second one with the same head and base.
package githubtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Pull is a pull request the fake opened.
type Pull struct {
	Repo                    string // "owner/name"
	Number                  int
	Title, Head, Base, Body string
	Draft                   bool
}

// Server is the fake.
type Server struct {
	// URL is the API base to give the adapter (github.WithBaseURL).
	URL   string
	token string
	repos map[string]bool
	srv   *httptest.Server

	mu       sync.Mutex
	pulls    []Pull
	requests int
}

// NewServer starts a fake that accepts token for the given repositories ("owner/name").
func NewServer(token string, repos ...string) *Server {
	s := &Server{token: token, repos: map[string]bool{}}
	for _, r := range repos {
		s.repos[r] = true
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the fake.
func (s *Server) Close() { s.srv.Close() }

// Pulls returns the pull requests opened so far.
func (s *Server) Pulls() []Pull {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Pull(nil), s.pulls...)
}

// Requests returns how many requests reached the fake.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	fail := func(code int, msg string, errs ...string) {
		body := map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request", "status": fmt.Sprint(code)}
		if len(errs) > 0 {
			var es []map[string]string
			for _, e := range errs {
				es = append(es, map[string]string{"resource": "PullRequest", "code": "custom", "message": e})
			}
			body["errors"] = es
		}
		reply(code, body)
	}
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		fail(401, "Bad credentials")
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/repos/")
	repo, ok2 := strings.CutSuffix(rest, "/pulls")
	if !ok || !ok2 || r.Method != http.MethodPost || !s.repos[repo] {
		fail(404, "Not Found")
		return
	}
	if r.Header.Get("Accept") != "application/vnd.github+json" || r.Header.Get("X-GitHub-Api-Version") != "2022-11-28" ||
		!strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		fail(415, "Unsupported Media Type")
		return
	}
	var body struct {
		Title, Head, Base, Body string
		Draft                   bool
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err := json.Unmarshal(raw, &body); err != nil {
		fail(400, "Problems parsing JSON")
		return
	}
	if body.Title == "" || body.Head == "" || body.Base == "" {
		fail(422, "Validation Failed", "title, head and base are required")
		return
	}
	for _, p := range s.pulls {
		if p.Repo == repo && p.Head == body.Head && p.Base == body.Base {
			owner, _, _ := strings.Cut(repo, "/")
			fail(422, "Validation Failed", fmt.Sprintf("A pull request already exists for %s:%s.", owner, body.Head))
			return
		}
	}
	p := Pull{Repo: repo, Number: len(s.pulls) + 1, Title: body.Title, Head: body.Head, Base: body.Base, Body: body.Body, Draft: body.Draft}
	s.pulls = append(s.pulls, p)
	reply(201, map[string]any{
		"number": p.Number, "state": "open", "draft": p.Draft, "title": p.Title,
		"html_url": fmt.Sprintf("https://github.com/%s/pull/%d", repo, p.Number),
		"head":     map[string]any{"ref": p.Head}, "base": map[string]any{"ref": p.Base},
	})
}
