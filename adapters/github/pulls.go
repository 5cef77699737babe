// Package github is a port.PullRequester on GitHub's REST API (POST
// /repos/{owner}/{repo}/pulls). The relay pushes a branch; this adapter opens a pull
// request only when the host asks for one (seed 001, WRITE_PATH_IS_BRANCH).
//
// The token comes from a host-side function at each call and travels only in the
// Authorization header; it is never logged or put in an error.
package github

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/port"
)

// DefaultBaseURL is GitHub's API.
const DefaultBaseURL = "https://api.github.com"

// APIVersion is the REST API version the adapter speaks.
const APIVersion = "2022-11-28"

// TokenFunc returns the token for a repository ("owner/name").
type TokenFunc func(ctx context.Context, repo string) (string, error)

// Option configures a PullRequester.
type Option func(*config) error

type config struct {
	baseURL string
	client  *http.Client
	token   TokenFunc
	logger  *slog.Logger
}

// WithBaseURL sets the API base (default DefaultBaseURL; GitHub Enterprise uses
// https://HOST/api/v3).
func WithBaseURL(u string) Option {
	return func(c *config) error {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" || p.User != nil {
			return port.Invalidf("base URL %q must be http(s)://host[/path] without credentials", u)
		}
		c.baseURL = strings.TrimSuffix(u, "/")
		return nil
	}
}

// WithHTTPClient sets the HTTP client (default: 30 s timeout, no redirects followed,
// so the Authorization header never goes to another host).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error { return optcheck.NotNil(&c.client, hc, "http client is nil") }
}

// WithToken sets the token source. Required.
func WithToken(f TokenFunc) Option {
	return func(c *config) error { return optcheck.Set(&c.token, f, f != nil, "token func is nil") }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { return optcheck.Logger(&c.logger, l) }
}

// PullRequester opens pull requests on GitHub.
type PullRequester struct{ cfg config }

var _ port.PullRequester = (*PullRequester)(nil)

// NewPullRequester returns a PullRequester. It does no I/O.
func NewPullRequester(opts ...Option) (*PullRequester, error) {
	cfg := config{
		baseURL: DefaultBaseURL,
		logger:  slog.New(slog.DiscardHandler),
		client: &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, &port.OpError{Op: "github.NewPullRequester", Err: err}
		}
	}
	if cfg.token == nil {
		return nil, &port.OpError{Op: "github.NewPullRequester", Err: port.Invalidf("no token source (WithToken)")}
	}
	return &PullRequester{cfg: cfg}, nil
}

// RepoFromURL returns "owner/name" from a clone URL such as
// https://github.com/owner/name.git.
func RepoFromURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", port.Invalidf("repository URL does not parse")
	}
	parts := strings.Split(strings.Trim(strings.TrimSuffix(u.Path, ".git"), "/"), "/")
	if len(parts) < 2 {
		return "", port.Invalidf("repository URL %s has no owner/name", u.Redacted())
	}
	owner, name := parts[len(parts)-2], parts[len(parts)-1]
	for _, s := range []string{owner, name} {
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "?#%") {
			return "", port.Invalidf("repository URL %s has no valid owner/name", u.Redacted())
		}
	}
	return owner + "/" + name, nil
}

type createBody struct {
	Title               string `json:"title"`
	Head                string `json:"head"`
	Base                string `json:"base"`
	Body                string `json:"body,omitempty"`
	Draft               bool   `json:"draft"`
	MaintainerCanModify bool   `json:"maintainer_can_modify"`
}

// OpenPullRequest implements port.PullRequester.
func (p *PullRequester) OpenPullRequest(ctx context.Context, spec port.PullRequestSpec) (*port.PullRequest, error) {
	op := &port.OpError{Op: "github.OpenPullRequest"}
	fail := func(e error) (*port.PullRequest, error) { op.Err = e; return nil, op }
	repo, err := RepoFromURL(spec.URL)
	if err != nil {
		return fail(err)
	}
	if spec.Head == "" || spec.Base == "" || spec.Title == "" || spec.Head == spec.Base {
		return fail(port.Invalidf("a pull request needs a title and distinct head and base branches"))
	}
	token, err := p.cfg.token(ctx, repo)
	if err != nil {
		return fail(fmt.Errorf("token for %s: %w", repo, err))
	}
	body, _ := json.Marshal(createBody{Title: spec.Title, Head: spec.Head, Base: spec.Base, Body: spec.Body, Draft: spec.Draft})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.baseURL+"/repos/"+repo+"/pulls", bytes.NewReader(body))
	if err != nil {
		return fail(port.Invalidf("request: %v", err))
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Api-Version", APIVersion)
	req.Header.Set("User-Agent", "agentsandbox-sandbox")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := p.cfg.client.Do(req)
	if err != nil {
		return fail(fmt.Errorf("%w: %s", port.ErrUnavailable, strings.ReplaceAll(err.Error(), token, "[redacted]")))
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated {
		var e struct {
			Message string `json:"message"`
			Errors  []struct {
				Message string `json:"message"`
			} `json:"errors"`
		}
		_ = json.Unmarshal(raw, &e)
		msg := e.Message
		for _, x := range e.Errors {
			msg += "; " + x.Message
		}
		msg = strings.ReplaceAll(msg, token, "[redacted]")
		if len(msg) > 500 {
			msg = msg[:500]
		}
		var sentinel error
		switch {
		case resp.StatusCode == 401 || resp.StatusCode == 403:
			sentinel = port.ErrPermissionDenied
		case resp.StatusCode == 404:
			sentinel = port.ErrNotFound
		case resp.StatusCode == 422 && strings.Contains(msg, "already exists"):
			sentinel = port.ErrConflict
		case resp.StatusCode == 422:
			sentinel = port.ErrInvalidSpec
		case resp.StatusCode >= 500 || resp.StatusCode == 429:
			sentinel = port.ErrUnavailable
		default:
			sentinel = port.ErrInternal
		}
		return fail(fmt.Errorf("%w: GitHub answered %d: %s", sentinel, resp.StatusCode, msg))
	}
	var pr struct {
		Number  int    `json:"number"`
		HTMLURL string `json:"html_url"`
	}
	if err := json.Unmarshal(raw, &pr); err != nil || pr.Number == 0 || pr.HTMLURL == "" {
		return fail(fmt.Errorf("%w: GitHub's answer has no pull request number or URL", port.ErrInternal))
	}
	p.cfg.logger.InfoContext(ctx, "github: pull request opened", "repo", repo, "number", pr.Number, "head", spec.Head, "base", spec.Base)
	return &port.PullRequest{Number: pr.Number, URL: pr.HTMLURL}, nil
}
