package containerd

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
)

// Defaults.
const (
	DefaultAddress     = "/run/containerd/containerd.sock"
	DefaultNamespace   = "agentsandbox"
	DefaultSnapshotter = "overlayfs"
	// DefaultCleanupConcurrency is how many finished runs may be being removed in the
	// background at once (see WithCleanupConcurrency).
	DefaultCleanupConcurrency = 16
	// DefaultKillGrace bounds how long a run that ran out of time waits for its kill to
	// be confirmed and its output to end (see WithKillGrace).
	DefaultKillGrace = 5 * time.Second
	// DefaultPoolDir holds the host directories of pooled sandboxes (see WithPoolDir).
	DefaultPoolDir = "/run/agentsandbox/pool"
)

// Option configures a Runner. Options validate their arguments.
type Option func(*config) error

type config struct {
	tel            *telemetry.T // WithMeterProvider; nil: the global provider
	address        string
	namespace      string
	snapshotter    string
	owner          string
	logger         *slog.Logger
	bridgePath     string
	cleanupTimeout time.Duration
	// killGrace bounds a timed-out run's kill, exit and output wait.
	killGrace time.Duration
	// cleanupConcurrency bounds the removals running in the background.
	cleanupConcurrency int
	// runtime is the OCI runtime binary the runc shim runs ("" for runc);
	// runtimeName is its name as WithRuntime got it ("" for runc).
	runtime, runtimeName string
	// poolStarted starts pooled sandboxes' stubs ahead of the claim.
	poolStarted bool
	// poolDir holds the host directories of pooled sandboxes.
	poolDir string
	// sessionRoot holds the sessions' host directories (see WithSessionDir).
	sessionRoot string
	// phaseHook, if set, is called at each phase boundary of a run (benchmarks).
	phaseHook func(phase string)
	// ignoreOOMEvents is for tests: OOM kills must be found without the event.
	ignoreOOMEvents bool
	// pullPolicy and registryCreds: see WithPullPolicy (pull.go).
	pullPolicy    port.PullPolicy
	registryCreds port.RegistryCredentials
}

func defaultConfig() config {
	addr := DefaultAddress
	// Honoured like DOCKER_HOST by the Docker adapter, and as ctr does.
	if a := os.Getenv("CONTAINERD_ADDRESS"); a != "" {
		addr = strings.TrimPrefix(a, "unix://")
	}
	return config{
		address:            addr,
		namespace:          DefaultNamespace,
		snapshotter:        DefaultSnapshotter,
		owner:              port.DefaultOwner,
		logger:             slog.New(slog.DiscardHandler),
		cleanupTimeout:     30 * time.Second,
		killGrace:          DefaultKillGrace,
		cleanupConcurrency: DefaultCleanupConcurrency,
		poolDir:            DefaultPoolDir,
		poolStarted:        true,
	}
}

var nsRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,75}[A-Za-z0-9])?$`)

// WithAddress sets the containerd socket (default: $CONTAINERD_ADDRESS, else
// DefaultAddress).
func WithAddress(addr string) Option {
	return func(c *config) error {
		return optcheck.Set(&c.address, addr, filepath.IsAbs(addr), "containerd address %q is not an absolute socket path", addr)
	}
}

// WithNamespace sets the containerd namespace the runner works in (default
// DefaultNamespace). Images must be in it.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		return optcheck.Set(&c.namespace, ns, nsRe.MatchString(ns), "namespace %q is not a valid containerd namespace", ns)
	}
}

// WithSnapshotter sets the snapshotter (default DefaultSnapshotter).
func WithSnapshotter(name string) Option {
	return func(c *config) error { return optcheck.Set(&c.snapshotter, name, name != "", "snapshotter is empty") }
}

// WithOwner sets the owner label value; sweeps only touch their owner's resources.
func WithOwner(owner string) Option {
	return func(c *config) error { return runner.SetOwner(&c.owner, owner) }
}

// WithLogger sets the logger; by default nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { return optcheck.Logger(&c.logger, l) }
}

// WithBridge sets the host path of a static sandbox-bridge binary, mounted read-only
// and made the entrypoint of runs with an LLM socket (see the docker adapter's WithBridge).
func WithBridge(path string) Option {
	return func(c *config) error { return runner.SetBridge(&c.bridgePath, path) }
}

// WithCleanupTimeout bounds the removal of a run's task, container and snapshot, which
// ignores the caller's cancellation so a cancelled caller cannot leak them. Default 30s.
func WithCleanupTimeout(d time.Duration) Option {
	return func(c *config) error { return optcheck.Positive(&c.cleanupTimeout, d, "cleanup timeout") }
}

// WithKillGrace bounds what a run that ran out of time (its limit, or the caller's
// context) waits for after the deadline: the kill, the task's exit and the end of its
// output, together. RunOnce returns by the deadline plus d whatever the task's shim
// does (a stopped or wedged shim cannot answer); the removal of what is left goes on
// in the background and stays labelled for Sweep. Default DefaultKillGrace.
func WithKillGrace(d time.Duration) Option {
	return func(c *config) error { return optcheck.Positive(&c.killGrace, d, "kill grace") }
}

// WithCleanupConcurrency sets how many finished runs may be being removed in the
// background at once (default DefaultCleanupConcurrency). RunOnce returns a run's
// result as soon as its output is in and leaves the removal of its task, container
// and snapshot to the background; past n pending removals it removes inline, so a
// burst of runs cannot pile up containers. Zero removes every run inline, before
// RunOnce returns. Close waits for pending removals; Sweep finds what a dead host
// left pending.
func WithCleanupConcurrency(n int) Option {
	return func(c *config) error { return optcheck.Count(&c.cleanupConcurrency, n, "cleanup concurrency") }
}

// WithPoolDir sets where warm pools keep their sandboxes' host directories (default
// DefaultPoolDir), under <dir>/<namespace>/<owner>/. Each holds the mount points a run's
// workspace, mounts and LLM socket directory are attached to; Sweep removes those of
// sandboxes that are gone. It must be on a local file system the daemon sees.
func WithPoolDir(dir string) Option {
	return func(c *config) error { return optcheck.AbsDir(&c.poolDir, dir, "pool directory") }
}

// WithPoolStarted says whether warm pools start each sandbox's stub when the sandbox
// is created (the default) or only when it is claimed. Started, a claim costs no
// runtime start (runc's start is most of a pooled run's latency otherwise) and the idle
// sandbox holds the bridge waiting on its stdin, smaller than runc's init waiting to be
// started (see docs/benchmarks.md). Either way no code of any run has run in a sandbox
// before its claim.
func WithPoolStarted(started bool) Option {
	return func(c *config) error {
		c.poolStarted = started
		return nil
	}
}
