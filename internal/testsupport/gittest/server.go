// Package gittest serves real git repositories over HTTP on loopback for tests: git
// http-backend behind net/http/cgi, with every request required to carry a token (HTTP
// basic auth, any user name), as a hosted remote would.
package gittest

import (
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// Server is a git smart-HTTP server on 127.0.0.1.
type Server struct {
	// URL is the server's base, e.g. http://127.0.0.1:41234; a repository NAME is at
	// URL + "/" + NAME + ".git".
	URL   string
	Root  string // the directory holding the bare repositories
	token string
	ln    net.Listener
	srv   *http.Server

	maxBody  atomic.Int64
	mu       sync.Mutex
	requests []string // "METHOD path?query" of every authorised request
	denied   atomic.Int64
}

// NewServer starts a server whose repositories live under root and which requires
// token as the basic-auth password of every request.
func NewServer(root, token string) (*Server, error) {
	backend, err := exec.LookPath("git")
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(backend, "--exec-path").Output()
	if err != nil {
		return nil, err
	}
	cgiPath := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), Root: root, token: token, ln: ln}
	s.maxBody.Store(1 << 30)
	h := &cgi.Handler{
		Path: cgiPath,
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=/dev/null",
			"PATH=" + os.Getenv("PATH"),
			"REMOTE_USER=agentsandbox",
		},
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorised(r) {
			s.denied.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.RequestURI())
		s.mu.Unlock()
		// git sends a push over http.postBuffer (1 MiB) chunked, and net/http/cgi
		// refuses chunked bodies (CGI needs CONTENT_LENGTH); real hosts accept them, so
		// the body is spooled to a file first and passed on with its length.
		if len(r.TransferEncoding) > 0 {
			f, err := spool(r.Body, s.maxBody.Load())
			if err != nil {
				http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
				return
			}
			defer os.Remove(f.Name())
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			r.Body, r.ContentLength, r.TransferEncoding = f, fi.Size(), nil
		}
		h.ServeHTTP(w, r)
	})}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *Server) authorised(r *http.Request) bool {
	a := r.Header.Get("Authorization")
	enc, ok := strings.CutPrefix(a, "Basic ")
	if !ok {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return false
	}
	_, pw, ok := strings.Cut(string(raw), ":")
	return ok && subtle.ConstantTimeCompare([]byte(pw), []byte(s.token)) == 1
}

// SetMaxBody caps a chunked request body (default 1 GiB); over it the server answers
// 413, as a host with a push size limit does.
func (s *Server) SetMaxBody(n int64) { s.maxBody.Store(n) }

// Requests returns the authorised requests so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// Denied returns how many requests were refused for a missing or wrong token.
func (s *Server) Denied() int64 { return s.denied.Load() }

// Close stops the server; later requests fail to connect.
func (s *Server) Close() error { return s.srv.Close() }

// RepoURL returns the URL of repository name.
func (s *Server) RepoURL(name string) string { return s.URL + "/" + name + ".git" }

// RepoDir returns the bare repository's directory.
func (s *Server) RepoDir(name string) string { return filepath.Join(s.Root, name+".git") }

// CreateRepo makes a bare repository name whose default branch is main, seeded with
// files (path -> content) in one commit, and accepting pushes. It returns the commit.
func (s *Server) CreateRepo(name string, files map[string]string) (string, error) {
	dir := s.RepoDir(name)
	work, err := os.MkdirTemp("", "gittest-seed-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	git := func(d string, args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = d
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=Seed", "GIT_AUTHOR_EMAIL=seed@example.com", "GIT_COMMITTER_NAME=Seed", "GIT_COMMITTER_EMAIL=seed@example.com",
			"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := git(work, "init", "-q", "-b", "main"); err != nil {
		return "", err
	}
	for p, c := range files {
		full := filepath.Join(work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return "", err
		}
	}
	if _, err := git(work, "add", "-A"); err != nil {
		return "", err
	}
	if _, err := git(work, "commit", "-q", "--allow-empty", "-m", "seed"); err != nil {
		return "", err
	}
	if _, err := git(work, "init", "-q", "--bare", "-b", "main", dir); err != nil {
		return "", err
	}
	if _, err := git(dir, "config", "http.receivepack", "true"); err != nil {
		return "", err
	}
	if _, err := git(work, "push", "-q", dir, "main:main"); err != nil {
		return "", err
	}
	return git(work, "rev-parse", "HEAD")
}

// Git runs the host's git with args in the bare repository name (tests read the
// server's side with it) and returns its trimmed output.
func (s *Server) Git(name string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_DIR="+s.RepoDir(name), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// spool copies a request body to a temporary file, at most max bytes, and rewinds it.
func spool(body io.Reader, max int64) (*os.File, error) {
	f, err := os.CreateTemp("", "gittest-body-")
	if err != nil {
		return nil, err
	}
	n, err := io.Copy(f, io.LimitReader(body, max+1))
	if err == nil && n > max {
		err = fmt.Errorf("request body over %d bytes", max)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}
