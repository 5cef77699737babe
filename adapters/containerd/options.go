package containerd

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/internal/adapterutil"
	"github.com/agentsandbox/sandbox/port"
)

// Defaults.
const (
	DefaultAddress     = "/run/containerd/containerd.sock"
	DefaultNamespace   = "agentsandbox"
	DefaultSnapshotter = "overlayfs"
)

// Option configures a Runner. Options validate their arguments.
type Option func(*config) error

type config struct {
	address        string
	namespace      string
	snapshotter    string
	owner          string
	logger         *slog.Logger
	bridgePath     string
	cleanupTimeout time.Duration
	// ignoreOOMEvents is for tests: OOM kills must be found without the event.
	ignoreOOMEvents bool
}

func defaultConfig() config {
	addr := DefaultAddress
	// Honoured like DOCKER_HOST by the Docker adapter, and as ctr does.
	if a := os.Getenv("CONTAINERD_ADDRESS"); a != "" {
		addr = strings.TrimPrefix(a, "unix://")
	}
	return config{
		address:        addr,
		namespace:      DefaultNamespace,
		snapshotter:    DefaultSnapshotter,
		owner:          port.DefaultOwner,
		logger:         slog.New(slog.DiscardHandler),
		cleanupTimeout: 30 * time.Second,
	}
}

var nsRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,75}[A-Za-z0-9])?$`)

// WithAddress sets the containerd socket (default: $CONTAINERD_ADDRESS, else
// DefaultAddress).
func WithAddress(addr string) Option {
	return func(c *config) error {
		if !filepath.IsAbs(addr) {
			return port.Invalidf("containerd address %q is not an absolute socket path", addr)
		}
		c.address = addr
		return nil
	}
}

// WithNamespace sets the containerd namespace the runner works in (default
// DefaultNamespace). Images must be in it.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if !nsRe.MatchString(ns) {
			return port.Invalidf("namespace %q is not a valid containerd namespace", ns)
		}
		c.namespace = ns
		return nil
	}
}

// WithSnapshotter sets the snapshotter (default DefaultSnapshotter).
func WithSnapshotter(name string) Option {
	return func(c *config) error {
		if name == "" {
			return port.Invalidf("snapshotter is empty")
		}
		c.snapshotter = name
		return nil
	}
}

// WithOwner sets the owner label value; sweeps only touch their owner's resources.
func WithOwner(owner string) Option {
	return func(c *config) error {
		if err := adapterutil.ValidateOwner(owner); err != nil {
			return err
		}
		c.owner = owner
		return nil
	}
}

// WithLogger sets the logger; by default nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return port.Invalidf("logger is nil")
		}
		c.logger = l
		return nil
	}
}

// WithBridge sets the host path of a static sandbox-bridge binary, mounted read-only
// and made the entrypoint of runs with an LLM socket (see the docker adapter's WithBridge).
func WithBridge(path string) Option {
	return func(c *config) error {
		if err := adapterutil.ValidateBridge(path); err != nil {
			return err
		}
		c.bridgePath = path
		return nil
	}
}

// WithCleanupTimeout bounds the removal of a run's task, container and snapshot, which
// ignores the caller's cancellation so a cancelled caller cannot leak them. Default 30s.
func WithCleanupTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return port.Invalidf("cleanup timeout %v is not positive", d)
		}
		c.cleanupTimeout = d
		return nil
	}
}
