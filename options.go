package sandbox

import (
	"log/slog"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Option configures a Sandbox. Options validate their arguments.
type Option func(*Sandbox) error

// LLM configures LLM access for runs.
type LLM struct {
	// Proxy starts the per-run proxies.
	Proxy port.ProxyManager
	// Upstream is the LiteLLM base URL the proxies forward to.
	Upstream string
	// APIKey is the LiteLLM key the proxies inject. It never enters a sandbox.
	APIKey string
	// KeyInProxy says the proxies hold the key themselves (sandbox-proxyd
	// -upstream-key-file, e.g. a Kubernetes Secret mounted into the daemon alone):
	// APIKey must then be empty, and the host never has the key.
	KeyInProxy bool
}

// WithLLM gives runs LLM access through per-run proxies.
func WithLLM(l LLM) Option {
	return func(s *Sandbox) error {
		if l.Proxy == nil {
			return port.Invalidf("llm: proxy manager is nil")
		}
		u, err := url.Parse(l.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return port.Invalidf("llm: upstream %q is not an http(s) URL without credentials", l.Upstream)
		}
		// The proxy manager validates the key fully; refuse here what no proxy accepts.
		switch {
		case l.KeyInProxy && l.APIKey != "":
			return port.Invalidf("llm: an api key with KeyInProxy (the proxies hold the key)")
		case l.KeyInProxy:
		case l.APIKey == "" || strings.ContainsFunc(l.APIKey, func(r rune) bool { return r <= ' ' || r > '~' }):
			return port.Invalidf("llm: api key is empty or not printable ASCII")
		}
		s.llm = &l
		return nil
	}
}

// WithReconciler reconciles each run's audited calls against the billing system when
// a Request asks for it.
func WithReconciler(r port.SpendReconciler) Option {
	return func(s *Sandbox) error {
		if r == nil {
			return port.Invalidf("reconciler is nil")
		}
		s.reconciler = r
		return nil
	}
}

// WithPool serves the runs whose shape is the pool's template (port.TemplateOf) from
// the pool: warm when it has a sandbox ready (pre-booted when the template has a
// Preload), else cold on the pool's runner. Result.Run.Start says which, and the
// pool's Stats count both. Repeatable; the host keeps the pool and closes it.
func WithPool(p port.Pool) Option {
	return func(s *Sandbox) error {
		if p == nil {
			return port.Invalidf("pool is nil")
		}
		s.pools = append(s.pools, p)
		return nil
	}
}

// WithReconcileTimeout bounds each run's reconciliation (default
// DefaultReconcileTimeout): calls LiteLLM has not logged by then are reported
// missing (port.ErrUnattributed).
func WithReconcileTimeout(d time.Duration) Option {
	return func(s *Sandbox) error {
		if d <= 0 || d > 24*time.Hour {
			return port.Invalidf("reconcile timeout %s out of range (0, 24h]", d)
		}
		s.reconcileTimeout, s.reconcileTimeoutSet = d, true
		return nil
	}
}

// WithoutWorkspaceCheck turns off Run's check that the sandbox user can enter, read
// and write the workspace (CheckWorkspace), for hosts where owner and mode bits do not
// tell: ACLs, or a runtime that remaps users (rootless Docker, userns-remap).
func WithoutWorkspaceCheck() Option {
	return func(s *Sandbox) error {
		s.noWorkspaceCheck = true
		return nil
	}
}

// WithLogger sets the logger; by default nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(s *Sandbox) error {
		if l == nil {
			return port.Invalidf("logger is nil")
		}
		s.logger = l
		return nil
	}
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// WithModelEnv names the environment variable that carries Request.Model to the agent
// (default DefaultModelEnv).
func WithModelEnv(name string) Option {
	return func(s *Sandbox) error {
		if !envNameRe.MatchString(name) {
			return port.Invalidf("model env %q is not an environment variable name", name)
		}
		s.modelEnv, s.modelEnvSet = name, true
		return nil
	}
}

// WithMessagesFile sets where a run's messages are written, relative to its workspace
// and with forward slashes (default DefaultMessagesFile). It is written through the
// workspace root, so symlinks cannot point it outside the workspace.
func WithMessagesFile(rel string) Option {
	return func(s *Sandbox) error {
		if rel == "" || strings.Contains(rel, `\`) || path.Clean(rel) != rel || !filepath.IsLocal(rel) {
			return port.Invalidf("messages file %q is not a clean relative path inside the workspace", rel)
		}
		s.messagesFile = rel
		return nil
	}
}
