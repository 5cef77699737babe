package gitcli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/port"
)

// Option configures a Relay.
type Option func(*config) error

// Credential is what the host's git presents to the remote (HTTP basic auth; for
// GitHub, Username "x-access-token" and a token as Password).
type Credential struct {
	Username string
	Password string
}

// CredentialFunc returns the credential for a remote URL. It is called on the host for
// each fetch and push; what it returns reaches git only through the environment of an
// askpass helper, never argv, a config file, a log line or an error.
type CredentialFunc func(ctx context.Context, url string) (Credential, error)

type config struct {
	gitBin        string
	cacheDir      string
	exporter      string
	creds         CredentialFunc
	logger        *slog.Logger
	sandboxUser   string
	uid, gid      int
	exportLimits  port.Limits
	exportTimeout time.Duration
}

func defaultConfig() config {
	return config{
		gitBin:        "git",
		cacheDir:      filepath.Join(os.TempDir(), "agentsandbox-git"),
		logger:        slog.New(slog.DiscardHandler),
		sandboxUser:   port.DefaultUser,
		uid:           1001,
		gid:           1001,
		exportTimeout: 2 * time.Minute, // below sandbox.DefaultRepoTimeout: the relay names its own timeout
	}
}

// WithGit sets the git program (default "git" on PATH).
func WithGit(path string) Option {
	return func(c *config) error { return optcheck.Set(&c.gitBin, path, path != "", "git program is empty") }
}

// WithCacheDir sets the host directory for mirrors, artefacts and scratch
// repositories (default $TMPDIR/agentsandbox-git). It must not be visible to sandboxes.
func WithCacheDir(dir string) Option {
	return func(c *config) error { return optcheck.AbsDir(&c.cacheDir, dir, "cache dir") }
}

// WithExporter sets the static exporter binary (cmd/sandbox-git-export, see
// BuildExporter). Its directory is mounted read-only into the export sandbox, so keep
// it in a directory of its own. Required for Export and Push.
func WithExporter(path string) Option {
	return func(c *config) error {
		return optcheck.Set(&c.exporter, path, filepath.IsAbs(path), "exporter %q is not absolute", path)
	}
}

// WithCredentials sets the host-side credential source. Without it, remotes are
// accessed anonymously.
func WithCredentials(f CredentialFunc) Option {
	return func(c *config) error { return optcheck.Set(&c.creds, f, f != nil, "credential func is nil") }
}

// WithLogger sets the logger (default: discard). Nothing logged carries a credential.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { return optcheck.Logger(&c.logger, l) }
}

var userRe = regexp.MustCompile(`^([0-9]{1,10}):([0-9]{1,10})$`)

// WithSandboxUser sets the "uid:gid" the agent and the exporter run as (default
// port.DefaultUser). A host running as root gives the cloned workspace to this user.
func WithSandboxUser(user string) Option {
	return func(c *config) error {
		m := userRe.FindStringSubmatch(user)
		if m == nil {
			return port.Invalidf("sandbox user %q is not numeric uid:gid", user)
		}
		var uid, gid int
		for i, s := range m[1:] {
			n := 0
			for _, ch := range s {
				n = n*10 + int(ch-'0')
			}
			if i == 0 {
				uid = n
			} else {
				gid = n
			}
		}
		if uid == 0 {
			return port.Invalidf("sandbox user %q is root", user)
		}
		c.sandboxUser, c.uid, c.gid = user, uid, gid
		return nil
	}
}

// WithExportLimits sets the export sandbox's limits (zero fields take the runner's
// defaults; the timeout defaults to 2 minutes, below the facade's 5-minute repo timeout).
func WithExportLimits(l port.Limits) Option {
	return func(c *config) error {
		if l.Timeout < 0 || l.MemoryBytes < 0 || l.PIDs < 0 {
			return port.Invalidf("export limits are negative")
		}
		c.exportLimits = l
		if l.Timeout > 0 {
			c.exportTimeout = l.Timeout
		}
		return nil
	}
}
