package docker

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
)

// Option configures a Runner or a ProxyManager (one type for both, as on every
// runtime adapter). Options validate their arguments. Most apply to both
// constructors; an option of one only (WithBridge, WithRuntime, ... of the runner;
// WithProxyImage, ... of the proxy manager) given to the other fails with
// port.ErrInvalidSpec naming it.
type Option func(*config) error

// SharedOption is Option.
//
// Deprecated: use Option; there is one option type.
type SharedOption = Option

// The constructors, as options name them when they do not apply.
const (
	ctorRunner = "NewRunner"
	ctorProxy  = "NewProxyManager"
)

// only makes an option that applies to ctor alone; given to the other
// constructor it fails with port.ErrInvalidSpec naming it.
func only(ctor, name string, set func(*config) error) Option {
	return func(c *config) error {
		if c.ctor != ctor {
			return port.Invalidf("docker.%s is an option of %s, not of %s", name, ctor, c.ctor)
		}
		return set(c)
	}
}

type config struct {
	ctor           string       // ctorRunner or ctorProxy: the constructor applying the options
	tel            *telemetry.T // WithMeterProvider; nil: the global provider
	host           string
	api            apiClient
	owner          string
	logger         *slog.Logger
	bridgePath     string
	cleanupTimeout time.Duration
	killGrace      time.Duration
	proxy          proxyConfig
	// cleanupConcurrency bounds the removals running in the background.
	cleanupConcurrency int
	// runtime is the OCI runtime the daemon runs sandboxes with ("" for its default).
	runtime string
	// sessionRoot holds the sessions' host directories (see WithSessionDir).
	sessionRoot string
	// poolDir holds the host directories of pooled sandboxes (see WithPoolDir).
	poolDir string
	// pullPolicy and registryCreds: see WithPullPolicy (pull.go).
	pullPolicy    port.PullPolicy
	registryCreds port.RegistryCredentials
}

func defaultConfig(ctor string) config {
	return config{
		ctor:               ctor,
		owner:              port.DefaultOwner,
		logger:             slog.New(slog.DiscardHandler),
		cleanupTimeout:     30 * time.Second,
		killGrace:          10 * time.Second,
		cleanupConcurrency: DefaultCleanupConcurrency,
		poolDir:            DefaultPoolDir,
		proxy: proxyConfig{
			image:        DefaultProxyImage,
			network:      DefaultProxyNetwork,
			baseDir:      filepath.Join(os.TempDir(), "agentsandbox-proxy"),
			readyTimeout: 15 * time.Second,
		},
	}
}

// WithHost sets the daemon address (e.g. "unix:///var/run/docker.sock"). The default is
// taken from the environment (DOCKER_HOST and friends), as the docker CLI does.
func WithHost(host string) Option {
	return func(c *config) error { return optcheck.Set(&c.host, host, host != "", "docker host is empty") }
}

// WithClient uses an existing SDK client instead of making one. The caller keeps
// ownership: Close does not close it.
func WithClient(cli *client.Client) Option {
	return func(c *config) error {
		if cli == nil {
			return port.Invalidf("docker client is nil")
		}
		c.api = borrowed{cli}
		return nil
	}
}

// WithOwner sets the owner label value. Sweeps only ever touch resources of their owner,
// so hosts sharing a daemon must use distinct owners.
func WithOwner(owner string) Option {
	return func(c *config) error { return runner.SetOwner(&c.owner, owner) }
}

// WithLogger sets the logger; by default nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { return optcheck.Logger(&c.logger, l) }
}

// WithBridge sets the host path of a static sandbox-bridge binary (cmd/sandbox-bridge).
// When a run has an LLM socket, the runner mounts it read-only and makes it the entrypoint,
// so the agent reaches the proxy at http://127.0.0.1:8080 with no socat in its image.
// Without it, the image must bring its own bridge.
func WithBridge(path string) Option {
	return only(ctorRunner, "WithBridge", func(c *config) error { return runner.SetBridge(&c.bridgePath, path) })
}

// WithCleanupTimeout bounds the removal of a run's container (and a proxy's), which
// ignores the caller's cancellation so that a cancelled caller cannot leak it. Default 30s.
func WithCleanupTimeout(d time.Duration) Option {
	return func(c *config) error { return optcheck.Positive(&c.cleanupTimeout, d, "cleanup timeout") }
}

// DefaultCleanupConcurrency is how many finished runs may be being removed in the
// background at once (see WithCleanupConcurrency).
const DefaultCleanupConcurrency = 16

// WithCleanupConcurrency sets how many finished runs may be being removed in the
// background at once (default DefaultCleanupConcurrency). RunOnce returns a run's
// result as soon as its output is in and leaves the removal of its container to the
// background; past n pending removals it removes inline, so a burst of runs cannot
// pile up containers. Zero removes inline, before RunOnce returns. Close waits for
// pending removals; Sweep finds what a dead host left pending.
func WithCleanupConcurrency(n int) Option {
	return only(ctorRunner, "WithCleanupConcurrency", func(c *config) error {
		return optcheck.Count(&c.cleanupConcurrency, n, "cleanup concurrency")
	})
}

// WithRuntime selects the OCI runtime the daemon runs sandboxes with, by the name it
// is registered under in the daemon's configuration ("runtimes" in daemon.json; runc is
// always there). scripts/setup.sh registers "runsc" (gVisor) and "crun" when they are
// installed. The lockdown is the same whichever runtime runs it.
func WithRuntime(name string) Option {
	return only(ctorRunner, "WithRuntime", func(c *config) error {
		if name == "" || strings.ContainsAny(name, " \t\r\n\x00/") {
			return port.Invalidf("runtime %q is not a registered runtime name", name)
		}
		c.runtime = name
		return nil
	})
}

// WithPoolDir sets where warm pools keep their sandboxes' host directories (default
// DefaultPoolDir), under <dir>/docker/<owner>/. Each holds the mount points a run's
// workspace, mounts and LLM socket directory are attached to; Sweep removes those of
// sandboxes that are gone. It must be on a local file system in the daemon's mount
// namespace.
func WithPoolDir(dir string) Option {
	return only(ctorRunner, "WithPoolDir", func(c *config) error { return optcheck.AbsDir(&c.poolDir, dir, "pool directory") })
}

func (c *config) apply(opts []Option) error {
	return optcheck.Apply(c, opts)
}

// connect makes the SDK client. It does no I/O: the client dials lazily.
func (c *config) connect() error {
	if c.api != nil {
		return nil
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if c.host != "" {
		opts = append(opts, client.WithHost(c.host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return fmt.Errorf("%w: docker client: %v", port.ErrInvalidSpec, err)
	}
	c.api = cli
	return nil
}

// borrowed wraps a caller-owned client so Close leaves it open.
type borrowed struct{ *client.Client }

func (borrowed) Close() error { return nil }
