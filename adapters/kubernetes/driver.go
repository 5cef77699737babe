package kubernetes

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// Scheme is the target scheme of Kubernetes clusters:
// "kubernetes://?kubeconfig=PATH&namespace=ns&pids=runtime". Its queries:
//
//   - kubeconfig= the kubeconfig file (default $KUBECONFIG, then ~/.kube/config,
//     then the in-cluster configuration of a Pod's service account);
//   - namespace= the Pods' namespace (default "default");
//   - pids= how a run's process limit is enforced, which a Pod cannot say itself:
//     "runtime" (the RuntimeClass runs cmd/sandbox-kube-runtime:
//     WithRuntimePIDsLimit) or the kubelet's podPidsLimit as a number
//     (WithNodePIDsLimit). Required: without it every run would be refused;
//   - pull= the agent image's pull policy (Always, IfNotPresent, Never);
//   - load= the target of the runtime the nodes load images from, URL-encoded
//     (a node's containerd in namespace k8s.io; see WithImageLoader).
//
// The common runtime= names the Pods' RuntimeClass (WithRuntime). The bridge and
// the network init (BuildInit, built next to the bridge) are hostPath mounts of this
// host's paths, as are workspaces: the nodes must see this host's paths (one node,
// or shared storage).
const Scheme = "kubernetes"

// Query parameters of kubernetes:// targets.
const (
	QueryKubeconfig = "kubeconfig"
	QueryNamespace  = "namespace"
	QueryPIDs       = "pids"
	QueryPull       = "pull"
)

func init() { port.RegisterRuntime(Scheme, driver{}) }

// driver opens Kubernetes targets (port.RuntimeDriver).
type driver struct{}

// Open implements port.RuntimeDriver. It reads the kubeconfig, builds the network
// init next to the bridge (cached by content) and opens the load= runtime.
func (driver) Open(ctx context.Context, target *url.URL, cfg port.RuntimeConfig) (port.Runtime, error) {
	q, err := port.TargetQuery(target, QueryKubeconfig, QueryNamespace, QueryPIDs, QueryPull, runner.QueryLoad)
	if err != nil {
		return nil, err
	}
	if target.Host != "" || (target.Path != "" && target.Path != "/") {
		return nil, port.Invalidf("kubernetes target %s names a host or path: the cluster comes from the kubeconfig (kubernetes://?kubeconfig=PATH)", target.Redacted())
	}
	rc, err := restConfig(q.Get(QueryKubeconfig))
	if err != nil {
		return nil, err
	}
	opts := []Option{WithConfig(rc)}
	switch pids := q.Get(QueryPIDs); pids {
	case "":
		return nil, port.Invalidf("kubernetes target %s: say how a run's process limit is enforced, which a Pod cannot: pids=runtime (the RuntimeClass runs sandbox-kube-runtime) or pids=N (the kubelet's podPidsLimit)", target.Redacted())
	case "runtime":
		opts = append(opts, WithRuntimePIDsLimit())
	default:
		n, err := strconv.ParseInt(pids, 10, 64)
		if err != nil {
			return nil, port.Invalidf("kubernetes target: pids=%q is neither runtime nor a number", pids)
		}
		opts = append(opts, WithNodePIDsLimit(n))
	}
	if q.Has(QueryNamespace) {
		opts = append(opts, WithNamespace(q.Get(QueryNamespace)))
	}
	if q.Has(QueryPull) {
		opts = append(opts, WithImagePullPolicy(corev1.PullPolicy(q.Get(QueryPull))))
	}
	return runner.OpenCluster(ctx, clusterDriver, opts, cfg, q.Get(runner.QueryLoad))
}

// clusterDriver is the rest of Open. The init container removes the Pod's network
// before the agent starts.
var clusterDriver = runner.ClusterDriver[Option, *Runner]{
	Name: "kubernetes", InitName: "the network init", BuildInit: BuildInit, DefaultDir: bridge.DefaultDir,
	Owner: WithOwner, Logger: WithLogger, Runtime: WithRuntime, Bridge: WithBridge, Init: WithInit,
	ImageLoader: WithImageLoader, New: NewRunner,
}

// restConfig reads the kubeconfig as kubectl does (the file given, else
// $KUBECONFIG, else ~/.kube/config), else the in-cluster configuration.
func restConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err == nil {
		return rc, nil
	}
	if path == "" {
		if ic, ierr := rest.InClusterConfig(); ierr == nil {
			return ic, nil
		}
	}
	return nil, port.Invalidf("kubernetes: no cluster configuration (kubeconfig=%q, $KUBECONFIG, ~/.kube/config, in-cluster): %v", path, err)
}

// Detect implements port.RuntimeDriver: a cluster is never chosen without a target.
func (driver) Detect(context.Context, *url.URL) (port.RuntimeInfo, error) {
	return port.RuntimeInfo{}, fmt.Errorf("%w: a Kubernetes cluster is chosen by its target (kubernetes://?kubeconfig=PATH), never detected", port.ErrUnsupported)
}
