package nomad

import (
	"context"
	"io"

	"github.com/agentsandbox/sandbox/port"
)

var _ port.Runtime = (*Runner)(nil)

// WithImageLoader makes LoadImage load images with l: the image store of the
// container runtime the cluster's client nodes use (on a one-machine cluster, this
// host's Docker engine: a docker.Runner; the target's load= query opens one). The
// runner cannot reach a node's image store through Nomad's API; only the host knows
// which store that is.
func WithImageLoader(l port.ImageLoader) Option {
	return func(c *config) error { return c.images.Set("nomad", l) }
}

// LoadImage implements port.ImageLoader through the loader WithImageLoader gave.
// Without one it fails with port.ErrUnsupported: Nomad's API cannot put an image on
// its nodes, so load it into each client node's Docker engine (`docker load`,
// docker.Runner.LoadImage) or push it to a registry the nodes pull from.
func (r *Runner) LoadImage(ctx context.Context, archive io.Reader) ([]string, error) {
	return r.cfg.images.Load(ctx, "nomad.LoadImage", archive, "Nomad's API cannot put an image on its client nodes: load it into each node's Docker engine (`docker load`, docker.Runner.LoadImage; a one-machine cluster's is this host's: nomad.WithImageLoader, or the target's load=docker://), or push it to a registry the nodes pull from")
}

// Close releases the API client's idle connections (unless the client came with
// WithClient) and closes the image loader the target's load= query opened. Jobs
// still running are not stopped; Sweep finds them.
func (r *Runner) Close() error {
	if r.cfg.client == nil {
		r.api.Close()
	}
	return r.cfg.images.Close()
}

var _ port.RuntimeReporter = (*Runner)(nil)

// Runtime implements port.RuntimeReporter: the OCI runtime name WithRuntime gave
// ("" for the docker driver's default).
func (r *Runner) Runtime() string { return r.cfg.runtime }
