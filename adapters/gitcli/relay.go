package gitcli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/agentsandbox/sandbox/port"
)

// Relay is a port.RepoRelay on the host's git. It is safe for concurrent use.
type Relay struct {
	runner port.SandboxRunner
	cfg    config

	askpassOnce sync.Once
	askpass     string
	askpassErr  error
}

var _ port.RepoRelay = (*Relay)(nil)

// NewRelay returns a Relay that runs its exporter with runner. It does no I/O.
func NewRelay(runner port.SandboxRunner, opts ...Option) (*Relay, error) {
	if runner == nil {
		return nil, &port.OpError{Op: "gitcli.NewRelay", Err: port.Invalidf("runner is nil")}
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, &port.OpError{Op: "gitcli.NewRelay", Err: err}
		}
	}
	return &Relay{runner: runner, cfg: cfg}, nil
}

// hardening is the config every git the relay runs gets on its command line (the
// values are constants: nothing from a request or a repository ever goes into -c).
var hardening = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.untrackedCache=false",
	"-c", "core.attributesFile=/dev/null",
	"-c", "core.sshCommand=false",
	"-c", "core.pager=cat",
	"-c", "core.askPass=",
	"-c", "credential.helper=",
	"-c", "protocol.allow=never",
	"-c", "protocol.file.allow=always",
	"-c", "submodule.recurse=false",
	"-c", "fetch.recurseSubmodules=false",
	"-c", "http.followRedirects=false",
	"-c", "gc.auto=0",
	"-c", "maintenance.auto=false",
	"-c", "core.bigFileThreshold=1m",
	"-c", "init.defaultBranch=main",
	"-c", "advice.detachedHead=false",
}

// gitEnv is the whole environment of every git the relay runs: nothing is inherited
// but PATH, so no GIT_DIR, GIT_SSH_COMMAND or proxy setting of the host leaks in.
func gitEnv(extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=/nonexistent",
		"XDG_CONFIG_HOME=/nonexistent",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_PROTOCOL_FROM_USER=0",
		"LC_ALL=C",
	}, extra...)
}

// gitCmd describes one git invocation.
type gitCmd struct {
	gitDir string   // GIT_DIR, if any
	dir    string   // working directory (default the cache dir)
	env    []string // extra environment
	stdin  io.Reader
	stdout io.Writer // default: captured
	secret string    // redacted from stderr
	args   []string
}

// gitError is a failed git invocation: its stderr, redacted and trimmed.
type gitError struct {
	args   []string
	stderr string
	err    error
}

func (e *gitError) Error() string {
	return fmt.Sprintf("git %s: %v: %s", e.args[0], e.err, e.stderr)
}

func (r *Relay) run(ctx context.Context, c gitCmd) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.cfg.gitBin, append(append([]string(nil), hardening...), c.args...)...)
	env := c.env
	if c.gitDir != "" {
		env = append(env, "GIT_DIR="+c.gitDir)
	}
	cmd.Env = gitEnv(env...)
	cmd.Dir = c.dir
	if cmd.Dir == "" {
		cmd.Dir = r.cfg.cacheDir
	}
	cmd.Stdin = c.stdin
	var out, stderr bytes.Buffer
	cmd.Stdout = &out
	if c.stdout != nil {
		cmd.Stdout = c.stdout
	}
	cmd.Stderr = &limitedBuffer{buf: &stderr, max: 64 << 10}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if c.secret != "" {
			msg = strings.ReplaceAll(msg, c.secret, "[redacted]")
		}
		if len(msg) > 2000 {
			msg = msg[:2000] + "…"
		}
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		return out.Bytes(), &gitError{args: c.args, stderr: msg, err: err}
	}
	return out.Bytes(), nil
}

type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// credentialEnv returns the environment that lets git authenticate to u through the
// askpass helper, and the secret to redact. With no credential source it is empty.
func (r *Relay) credentialEnv(ctx context.Context, u string) ([]string, string, error) {
	if r.cfg.creds == nil {
		return []string{"GIT_ASKPASS=/bin/false"}, "", nil
	}
	cred, err := r.cfg.creds(ctx, u)
	if err != nil {
		return nil, "", fmt.Errorf("credential for %s: %w", u, err)
	}
	if strings.ContainsAny(cred.Username+cred.Password, "\x00\n\r") {
		return nil, "", port.Invalidf("credential for %s has a control character", u)
	}
	helper, err := r.askpassHelper()
	if err != nil {
		return nil, "", err
	}
	return []string{
		"GIT_ASKPASS=" + helper,
		"AGENTSANDBOX_GIT_USERNAME=" + cred.Username,
		"AGENTSANDBOX_GIT_PASSWORD=" + cred.Password,
	}, cred.Password, nil
}

// askpassScript answers git's prompts from the environment: the file holds no secret.
const askpassScript = `#!/bin/sh
case "$1" in
Username*) printf '%s\n' "$AGENTSANDBOX_GIT_USERNAME" ;;
*) printf '%s\n' "$AGENTSANDBOX_GIT_PASSWORD" ;;
esac
`

func (r *Relay) askpassHelper() (string, error) {
	r.askpassOnce.Do(func() {
		dir := filepath.Join(r.cfg.cacheDir, "bin")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			r.askpassErr = err
			return
		}
		p := filepath.Join(dir, "askpass.sh")
		tmp := p + "." + randHex(4)
		if err := os.WriteFile(tmp, []byte(askpassScript), 0o700); err != nil {
			r.askpassErr = err
			return
		}
		if err := os.Rename(tmp, p); err != nil {
			r.askpassErr = err
			return
		}
		r.askpass = p
	})
	return r.askpass, r.askpassErr
}

// checkURL accepts http and https remotes without credentials, query or fragment.
func checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, port.Invalidf("remote URL does not parse")
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, port.Invalidf("remote URL scheme %q: only http and https", u.Scheme)
	case u.User != nil:
		return nil, port.Invalidf("remote URL carries credentials; give them with WithCredentials")
	case u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return nil, port.Invalidf("remote URL %s must be scheme://host/path", u.Redacted())
	case strings.ContainsAny(raw, " \t\r\n\x00"):
		return nil, port.Invalidf("remote URL has whitespace")
	}
	return u, nil
}

func (r *Relay) mirrorDir(u string) string {
	sum := sha256.Sum256([]byte(u))
	return filepath.Join(r.cfg.cacheDir, "mirrors", hex.EncodeToString(sum[:12])+".git")
}

var mirrorLocks sync.Map // path -> *sync.Mutex

// lockMirror serialises work on one mirror within the process and, with flock, across
// processes sharing the cache.
func (r *Relay) lockMirror(dir string) (func(), error) {
	m, _ := mirrorLocks.LoadOrStore(dir, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		mu.Unlock()
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		mu.Unlock()
		return nil, err
	}
	return func() { f.Close(); mu.Unlock() }, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// scratchDir makes a host-private directory under the cache.
func (r *Relay) scratchDir(kind, runID string) (string, error) {
	base := filepath.Join(r.cfg.cacheDir, kind)
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(base, runID+"-")
}

// classifyRemote turns a failed fetch, ls-remote or push into a sentinel.
func classifyRemote(err error) error {
	var ge *gitError
	if !errors.As(err, &ge) {
		return fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	s := ge.stderr
	if st := remoteStatus(s); st != 0 {
		var kind error
		switch {
		case st == 401 || st == 403:
			kind = port.ErrPermissionDenied
		case st == 404:
			kind = port.ErrNotFound
		case st == 409:
			kind = port.ErrConflict
		case st >= 500:
			kind = port.ErrUnavailable
		case st >= 400:
			kind = port.ErrRejected
		}
		if kind != nil {
			return fmt.Errorf("%w: the remote answered HTTP %d: %v", kind, st, err)
		}
	}
	switch {
	case strings.Contains(s, "Authentication failed") || strings.Contains(s, "could not read Username") ||
		strings.Contains(s, "could not read Password") || strings.Contains(s, " 401") || strings.Contains(s, " 403"):
		return fmt.Errorf("%w: %v", port.ErrPermissionDenied, err)
	case strings.Contains(s, "non-fast-forward") || strings.Contains(s, "fetch first") || strings.Contains(s, "[rejected]") || strings.Contains(s, "stale info"):
		return fmt.Errorf("%w: %v", port.ErrConflict, err)
	case strings.Contains(s, "Could not resolve host") || strings.Contains(s, "Failed to connect") ||
		strings.Contains(s, "Connection refused") || strings.Contains(s, "timed out") || strings.Contains(s, "Empty reply") ||
		strings.Contains(s, "couldn't connect") || strings.Contains(s, " 502") || strings.Contains(s, " 503") || strings.Contains(s, " 504"):
		return fmt.Errorf("%w: %v", port.ErrUnavailable, err)
	case strings.Contains(s, "not found") || strings.Contains(s, " 404") || strings.Contains(s, "couldn't find remote ref"):
		return fmt.Errorf("%w: %v", port.ErrNotFound, err)
	}
	return fmt.Errorf("%w: %v", port.ErrInternal, err)
}

// remoteStatusRe is how git's HTTP transport reports a status it got.
var remoteStatusRe = regexp.MustCompile(`The requested URL returned error: ([1-5][0-9][0-9])`)

// remoteStatus is the HTTP status git's stderr reports, 0 when none.
func remoteStatus(stderr string) int {
	m := remoteStatusRe.FindStringSubmatch(stderr)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
