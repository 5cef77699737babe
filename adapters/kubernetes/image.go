package kubernetes

import (
	"context"
	"io"

	"github.com/agentsandbox/sandbox/port"
)

var _ port.Runtime = (*Runner)(nil)

// WithImageLoader makes LoadImage load images with l: the image store of the
// container runtime the cluster's nodes use (on a one-node cluster on this host, its
// containerd in the k8s.io namespace: a containerd.Runner; the target's load= query
// opens one). Images loaded so are found by the default pull policy
// (IfNotPresent). The API server cannot put an image on its nodes; only the host
// knows which store that is.
func WithImageLoader(l port.ImageLoader) Option {
	return func(c *config) error { return c.images.Set("kubernetes", l) }
}

// WithRuntime selects the OCI runtime sandboxes run with, by name, as on every
// runtime adapter ("runc", "runsc", "crun"): the Pods' RuntimeClass is the one of
// that name, the way kubelocal and most clusters name their classes after the
// handler. WithRuntimeClass takes a class of another name.
func WithRuntime(name string) Option {
	return func(c *config) error {
		if !dnsLabelRe.MatchString(name) {
			return port.Invalidf("kubernetes: runtime %q is not a runtime name (runc, runsc, crun)", name)
		}
		c.runtimeClass = name
		return nil
	}
}

// LoadImage implements port.ImageLoader through the loader WithImageLoader gave.
// Without one it fails with port.ErrUnsupported: the API server cannot put an image
// on its nodes, so import it into each node's container runtime (`ctr -n k8s.io
// images import`, containerd.Runner.LoadImage in namespace k8s.io), or push it to a
// registry the nodes pull from.
func (r *Runner) LoadImage(ctx context.Context, archive io.Reader) ([]string, error) {
	return r.cfg.images.Load(ctx, "kubernetes.LoadImage", archive, "the Kubernetes API cannot put an image on its nodes: import it into each node's container runtime (`ctr -n k8s.io images import`, containerd.Runner.LoadImage with WithNamespace(\"k8s.io\"); a node on this host: kubernetes.WithImageLoader, or the target's load=containerd://...), or push it to a registry the nodes pull from")
}

// Close closes the image loader the target's load= query opened. The clientset
// holds nothing to release; Pods still running are not stopped (Sweep finds them).
func (r *Runner) Close() error {
	return r.cfg.images.Close()
}
