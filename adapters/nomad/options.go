package nomad

import (
	"log/slog"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// Option configures a Runner. Options validate their arguments.
type Option func(*config) error

type config struct {
	address     string
	client      *api.Client
	token       string
	region      string
	namespace   string
	datacenters []string
	owner       string
	logger      *slog.Logger

	bridgePath string
	initPath   string
	runtime    string

	proxyImage   string
	proxyNetwork string

	pollInterval   time.Duration
	cleanupTimeout time.Duration
	cpuMHz         int
	hostPaths      bool
	copyWorkspace  bool

	// images loads images for the nodes (WithImageLoader, or the target's load=).
	images runner.NodeImages
}

func defaultConfig() config {
	return config{
		datacenters:    []string{"*"},
		owner:          port.DefaultOwner,
		logger:         slog.New(slog.DiscardHandler),
		proxyImage:     DefaultProxyImage,
		proxyNetwork:   "host",
		pollInterval:   50 * time.Millisecond,
		cleanupTimeout: 30 * time.Second,
		cpuMHz:         100,
		hostPaths:      true,
	}
}

// DefaultProxyImage is the sidecar image the runner uses for runs with an LLM proxy
// (see ProxyImage, which builds it).
const DefaultProxyImage = "agentsandbox/llmproxy:latest"

// WithAddress sets the Nomad HTTP API address (e.g. "http://127.0.0.1:4646"). The
// default comes from the environment as the nomad CLI reads it (NOMAD_ADDR, ...).
func WithAddress(addr string) Option {
	return func(c *config) error {
		if addr == "" || strings.ContainsAny(addr, " \t\r\n") {
			return port.Invalidf("nomad address %q is empty or has whitespace", addr)
		}
		c.address = addr
		return nil
	}
}

// WithClient uses an existing API client (its address, TLS and token) instead of
// making one.
func WithClient(cli *api.Client) Option {
	return func(c *config) error {
		if cli == nil {
			return port.Invalidf("nomad client is nil")
		}
		c.client = cli
		return nil
	}
}

// WithToken sets the ACL token the runner uses. It must be allowed to submit, read and
// purge jobs, read allocations' files, signal and garbage-collect allocations, and
// write, read, list and destroy variables under nomad/jobs/ in its namespace.
func WithToken(token string) Option {
	return func(c *config) error {
		c.token = token
		return nil
	}
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// WithNamespace sets the namespace jobs are submitted in (default: the client's).
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if !nameRe.MatchString(ns) {
			return port.Invalidf("namespace %q is not a valid name", ns)
		}
		c.namespace = ns
		return nil
	}
}

// WithRegion sets the region jobs are submitted in (default: the client's).
func WithRegion(region string) Option {
	return func(c *config) error {
		if !nameRe.MatchString(region) {
			return port.Invalidf("region %q is not a valid name", region)
		}
		c.region = region
		return nil
	}
}

// WithDatacenters sets the datacenters jobs may be placed in (default "*": any).
func WithDatacenters(dcs ...string) Option {
	return func(c *config) error {
		if len(dcs) == 0 {
			return port.Invalidf("no datacenters")
		}
		for _, dc := range dcs {
			if dc != "*" && !nameRe.MatchString(dc) {
				return port.Invalidf("datacenter %q is not a valid name", dc)
			}
		}
		c.datacenters = append([]string(nil), dcs...)
		return nil
	}
}

// WithOwner sets the owner recorded in every job's meta. Sweeps only ever touch jobs of
// their owner, so hosts sharing a cluster must use distinct owners.
func WithOwner(owner string) Option {
	return func(c *config) error {
		if err := runner.ValidateOwner(owner); err != nil {
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

// WithBridge sets the path of a static sandbox-bridge binary (bridge.Build) on the
// client nodes. It is bind-mounted read-only into each sandbox and made its
// entrypoint, so the agent reaches its proxy at http://127.0.0.1:8080. The path must
// exist on every client node (installed with the Nomad client; on a one-machine
// cluster the host's file will do). Only its form is checked here; a path missing on
// the node makes the run fail with port.CodeContainerFailed.
func WithBridge(path string) Option {
	return func(c *config) error {
		if err := nodePath("bridge", path); err != nil {
			return err
		}
		c.bridgePath = path
		return nil
	}
}

// WithInit sets the path of a static sandbox-nomad-init binary (BuildInit) on the
// client nodes, run before the bridge: it strips the NOMAD_* variables Nomad adds to
// every task, so the agent's environment is exactly the spec's, waits for the
// proxy's socket, and caps the output and holds the task until Nomad has stored all
// of it. Without it the agent also sees Nomad's variables (ids and paths, no
// secrets), its first LLM call may race the sidecar's start, and the last output of
// a run can be lost.
func WithInit(path string) Option {
	return func(c *config) error {
		if err := nodePath("init", path); err != nil {
			return err
		}
		c.initPath = path
		return nil
	}
}

// WithRuntime selects the OCI runtime the docker driver runs sandboxes with (it must
// be in the client's docker plugin allow_runtimes).
func WithRuntime(name string) Option {
	return func(c *config) error {
		if name == "" || strings.ContainsAny(name, " \t\r\n\x00/") {
			return port.Invalidf("runtime %q is not a registered runtime name", name)
		}
		c.runtime = name
		return nil
	}
}

// WithProxyImage sets the sidecar image of runs with an LLM proxy (default
// DefaultProxyImage). It must be available to the docker driver on every client node.
func WithProxyImage(ref string) Option {
	return func(c *config) error {
		if ref == "" || strings.ContainsAny(ref, " \t\r\n\x00") {
			return port.Invalidf("proxy image %q is empty or has whitespace", ref)
		}
		c.proxyImage = ref
		return nil
	}
}

// WithProxyNetwork sets the docker network mode of the proxy sidecar (default "host":
// the proxy needs a route to LiteLLM). The sandbox task always has none.
func WithProxyNetwork(mode string) Option {
	return func(c *config) error {
		if mode == "" || mode == "none" || strings.ContainsAny(mode, " \t\r\n\x00") {
			return port.Invalidf("proxy network %q is not a usable network mode", mode)
		}
		c.proxyNetwork = mode
		return nil
	}
}

// WithPollInterval sets how often the runner polls a run's allocation while waiting
// (default 50 ms; it also uses Nomad's blocking queries).
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return port.Invalidf("poll interval %v is not positive", d)
		}
		c.pollInterval = d
		return nil
	}
}

// WithCleanupTimeout bounds the removal of a run's job, which ignores the caller's
// cancellation so that a cancelled caller cannot leak it. Default 30 s.
func WithCleanupTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return port.Invalidf("cleanup timeout %v is not positive", d)
		}
		c.cleanupTimeout = d
		return nil
	}
}

// WithCPU sets the CPU (in MHz, Nomad's unit) each sandbox reserves for scheduling
// (default 100). Limits.NanoCPUs, when set, must be whole cores and is reserved as
// such instead.
func WithCPU(mhz int) Option {
	return func(c *config) error {
		if mhz < 1 {
			return port.Invalidf("cpu %d MHz is not positive", mhz)
		}
		c.cpuMHz = mhz
		return nil
	}
}

// WithHostPaths says whether host paths in specs (WorkspaceDir, Mounts, an LLM socket
// HostDir) may be used: they are bind-mounted from the client node, so they only make
// sense where every node sees the same path (one machine, or shared storage). On by
// default; off, such a spec is refused with port.ErrUnsupported.
func WithHostPaths(on bool) Option {
	return func(c *config) error {
		c.hostPaths = on
		return nil
	}
}

// Limits of WithWorkspaceCopy.
const (
	// MaxWorkspaceIn is the most a workspace may hold to be copied into the cluster
	// (it travels in the job, base64-encoded).
	MaxWorkspaceIn = 4 << 20
	// MaxWorkspaceOut and MaxWorkspaceFiles bound what is copied back.
	MaxWorkspaceOut   = 256 << 20
	MaxWorkspaceFiles = 10000
)

// WithWorkspaceCopy makes RunSpec.WorkspaceDir a directory of the host running the
// runner rather than of the node: its regular files and directories (at most
// MaxWorkspaceIn bytes) are copied into the run's allocation before the sandbox starts,
// and what the sandbox leaves there is copied back when it ends (regular files and
// directories only, through os.Root: a link the agent made is never followed; files it
// deleted stay on the host). In the sandbox the workspace is a tmpfs of the run's
// Limits.TmpfsBytes (a volume of Docker's local driver: the client's docker plugin
// needs volumes enabled), so the agent cannot fill the node's disk through it. It
// needs WithInit (the init unpacks the input and sends the workspace back). Without
// it, the workspace is bind-mounted from the node (WithHostPaths).
func WithWorkspaceCopy(on bool) Option {
	return func(c *config) error {
		c.copyWorkspace = on
		return nil
	}
}

// nodePath checks a path on the client nodes. It cannot be checked from here (the
// nodes are elsewhere); a missing file makes the run fail with container_failed.
func nodePath(what, p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsAny(p, " \t\r\n\x00:") {
		return port.Invalidf("%s path %q is not a clean absolute path", what, p)
	}
	return nil
}

func (c *config) apply(opts []Option) error {
	return optcheck.Apply(c, opts)
}
