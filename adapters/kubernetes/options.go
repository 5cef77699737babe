package kubernetes

import (
	"log/slog"
	"path"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// Option configures a Runner. Options validate their arguments.
type Option func(*config) error

type config struct {
	restConfig *rest.Config
	client     k8s.Interface
	namespace  string
	owner      string
	logger     *slog.Logger

	bridgePath   string
	initPath     string
	runtimeClass string
	pullPolicy   corev1.PullPolicy
	nodePIDs     int64
	runtimePIDs  bool
	netdown      bool
	// runtimeNetdown: the node's runtime wrapper empties the Pod's network namespace
	// (NetdownAnnotation) instead of the init container.
	runtimeNetdown bool
	hostPaths      bool
	sessionRoot    string

	pollInterval   time.Duration
	cleanupTimeout time.Duration

	// images loads images for the nodes (WithImageLoader, or the target's load=).
	images runner.NodeImages
}

func defaultConfig() config {
	return config{
		namespace:      "default",
		owner:          port.DefaultOwner,
		logger:         slog.New(slog.DiscardHandler),
		pullPolicy:     corev1.PullIfNotPresent,
		netdown:        true,
		hostPaths:      true,
		pollInterval:   100 * time.Millisecond,
		cleanupTimeout: 60 * time.Second,
	}
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return port.Invalidf("nil option")
		}
		if err := o(c); err != nil {
			return err
		}
	}
	if c.restConfig == nil && c.client == nil {
		return port.Invalidf("kubernetes: WithConfig or WithClient is required")
	}
	if c.netdown && c.initPath == "" {
		return port.Invalidf("kubernetes: WithInit is required (the init container removes the Pod's network; WithoutNetworkInit only for a runtime class with no network of its own)")
	}
	return nil
}

// DNS-1123 label (namespaces) and label values (owner).
var (
	dnsLabelRe   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	labelValueRe = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
)

// WithConfig sets the client configuration (from a kubeconfig, or in-cluster).
func WithConfig(cfg *rest.Config) Option {
	return func(c *config) error {
		if cfg == nil {
			return port.Invalidf("kubernetes: rest config is nil")
		}
		c.restConfig = rest.CopyConfig(cfg)
		return nil
	}
}

// WithClient uses an existing clientset. Runs still need WithConfig for nothing else;
// a clientset alone is enough.
func WithClient(cli k8s.Interface) Option {
	return func(c *config) error {
		if cli == nil {
			return port.Invalidf("kubernetes: client is nil")
		}
		c.client = cli
		return nil
	}
}

// WithNamespace sets the namespace the runner's Pods live in (default "default"). The
// runner's RBAC is a Role there (see Role).
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if !dnsLabelRe.MatchString(ns) {
			return port.Invalidf("kubernetes: namespace %q is not a DNS-1123 label", ns)
		}
		c.namespace = ns
		return nil
	}
}

// WithOwner sets the owner label value on every Pod (default port.DefaultOwner); Sweep
// only ever touches Pods of its owner. It must be a valid label value.
func WithOwner(owner string) Option {
	return func(c *config) error {
		if !labelValueRe.MatchString(owner) {
			return port.Invalidf("kubernetes: owner %q is not a label value ([A-Za-z0-9][-A-Za-z0-9_.]{0,61}[A-Za-z0-9])", owner)
		}
		c.owner = owner
		return nil
	}
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return port.Invalidf("kubernetes: logger is nil")
		}
		c.logger = l
		return nil
	}
}

// WithBridge sets the node path of the in-sandbox bridge (bridge.Build), mounted
// read-only into every Pod; it must be at that path on every node.
func WithBridge(p string) Option {
	return func(c *config) error {
		if !path.IsAbs(p) {
			return port.Invalidf("kubernetes: bridge path %q is not absolute", p)
		}
		c.bridgePath = p
		return nil
	}
}

// WithInit sets the node path of cmd/sandbox-kube-init (BuildInit), mounted read-only
// into every Pod: the init container that removes the Pod's network and the agent
// container's first process. It must be at that path on every node.
func WithInit(p string) Option {
	return func(c *config) error {
		if !path.IsAbs(p) {
			return port.Invalidf("kubernetes: init path %q is not absolute", p)
		}
		c.initPath = p
		return nil
	}
}

// WithRuntimeClass sets the RuntimeClass of every Pod (e.g. "runc", or "runsc" for
// gVisor); empty means the cluster's default. Runtime reports it.
func WithRuntimeClass(name string) Option {
	return func(c *config) error {
		if name != "" && !dnsLabelRe.MatchString(name) {
			return port.Invalidf("kubernetes: runtime class %q is not a DNS-1123 label", name)
		}
		c.runtimeClass = name
		return nil
	}
}

// WithImagePullPolicy sets the agent image's pull policy (default IfNotPresent;
// Never for images loaded on the nodes).
func WithImagePullPolicy(p corev1.PullPolicy) Option {
	return func(c *config) error {
		switch p {
		case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
			c.pullPolicy = p
			return nil
		}
		return port.Invalidf("kubernetes: pull policy %q", p)
	}
}

// WithNodePIDsLimit declares the nodes' per-Pod process limit (the kubelet's
// podPidsLimit): Kubernetes has no per-Pod field, so a spec's Limits.PIDs is honoured
// only when it is at least this (the node's limit is then the stricter one). Without
// it the runner cannot promise any process limit and refuses every run with
// port.ErrUnsupported.
func WithNodePIDsLimit(n int64) Option {
	return func(c *config) error {
		if n < 1 {
			return port.Invalidf("kubernetes: node pids limit %d", n)
		}
		c.nodePIDs = n
		return nil
	}
}

// WithRuntimePIDsLimit declares that the Pods' RuntimeClass runs
// cmd/sandbox-kube-runtime, which sets each container's process limit from the Pod's
// PIDsAnnotation: every spec's Limits.PIDs is then enforced exactly, per run, and
// visible to the sandbox (the attestation checks it).
func WithRuntimePIDsLimit() Option {
	return func(c *config) error {
		c.runtimePIDs = true
		return nil
	}
}

// WithoutNetworkInit drops the init container that removes the Pod's interfaces. Use
// it only with a RuntimeClass whose sandboxes have no network of their own (gVisor
// with --network=none): the attestation still proves what the agent sees.
func WithoutNetworkInit() Option {
	return func(c *config) error {
		c.netdown = false
		return nil
	}
}

// WithRuntimeNetworkRemoval declares that the Pods' RuntimeClass runs
// cmd/sandbox-kube-runtime, and has it remove the Pod's network instead of the init
// container: the runner sets NetdownAnnotation and the wrapper, as it creates the
// agent's container, enters the Pod's network namespace, deletes every interface but
// lo and refuses to create the container if anything is left. The Pod then has no
// init container and no container with a capability (the namespace needs no
// NET_ADMIN), and a run is faster by the init container's start and the kubelet's
// noticing its end (up to a second). The node's containerd must pass the annotation
// (pod_annotations); the bridge's attestation still proves, per run, what the agent
// sees.
func WithRuntimeNetworkRemoval() Option {
	return func(c *config) error {
		c.runtimeNetdown = true
		c.netdown = false
		return nil
	}
}

// WithHostPaths allows RunSpec.WorkspaceDir, Mounts and a host LLM socket directory as
// hostPath volumes (default true): right on one node or with the same paths on every
// node (shared storage, a node-local proxy daemon).
func WithHostPaths(on bool) Option {
	return func(c *config) error {
		c.hostPaths = on
		return nil
	}
}

// WithCleanupTimeout bounds the removal of a run's Pod (default 60 s).
func WithCleanupTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return port.Invalidf("kubernetes: cleanup timeout %v", d)
		}
		c.cleanupTimeout = d
		return nil
	}
}
