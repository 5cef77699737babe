package containerd

import (
	"context"
	"io"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	clog "github.com/containerd/log"
	"github.com/sirupsen/logrus"

	"github.com/agentsandbox/sandbox/internal/runner/imagepull"
	"github.com/agentsandbox/sandbox/port"
)

var _ port.ImagePuller = (*Runner)(nil)

// PullImage implements port.ImagePuller: containerd fetches ref into the runner's
// namespace and unpacks it for the runner's snapshotter, with the credentials
// WithRegistryCredentials gives for its registry (held by this process's resolver
// only; no sandbox sees them). Loopback registries are spoken to over plain HTTP,
// as Docker allows for 127.0.0.0/8. A digest-pinned reference is
// fetched by digest (containerd verifies every blob against its digest); with a tag
// too, the tag must name that digest at the registry. Errors are *port.PullError (see
// port.ImagePuller).
func (r *Runner) PullImage(ctx context.Context, ref string, policy port.PullPolicy) (port.PulledImage, error) {
	if err := r.reachable(); err != nil {
		return port.PulledImage{}, opErr("PullImage", "", err)
	}
	p, err := r.pull(r.ns(ctx), ref, policy)
	if err != nil {
		return port.PulledImage{}, opErr("PullImage", "", err)
	}
	return p, nil
}

func (r *Runner) pull(ctx context.Context, ref string, policy port.PullPolicy) (port.PulledImage, error) {
	q, err := imagepull.NewRequest(ref, policy)
	if err != nil {
		return port.PulledImage{}, err
	}
	if policy != port.PullAlways {
		if i, err := r.cli.ImageService().Get(ctx, q.Local); err == nil {
			ok, uerr := client.NewImage(r.cli, i).IsUnpacked(ctx, r.cfg.snapshotter)
			if uerr == nil && ok && (q.Image.Digest == "" || i.Target.Digest == q.Image.Digest) {
				return port.PulledImage{Ref: q.Local, Digest: i.Target.Digest.String()}, nil
			}
		}
		if policy == port.PullNever || policy == "" {
			return port.PulledImage{}, q.NotHeld("namespace " + r.cfg.namespace)
		}
	}
	// The resolver logs every refused request to logrus's standard logger (stderr);
	// this library logs nothing unless given a logger, and the error says it all.
	ctx = clog.WithLogger(ctx, quiet)
	var credErr error
	auth := docker.NewDockerAuthorizer(docker.WithAuthCreds(func(host string) (string, string, error) {
		a, ok, err := imagepull.Auth(ctx, r.cfg.registryCreds, host)
		if err != nil {
			credErr = err
			return "", "", err
		}
		if !ok {
			return "", "", nil
		}
		return a.Username, a.Password, nil
	}))
	resolver := docker.NewResolver(docker.ResolverOptions{
		// Loopback registries speak plain HTTP, as Docker allows for 127.0.0.0/8.
		Hosts: docker.ConfigureDefaultRegistries(docker.WithAuthorizer(auth), docker.WithPlainHTTP(docker.MatchLocalhost)),
	})
	if q.Image.Digest != "" && q.Image.Tag != "" {
		_, desc, err := resolver.Resolve(ctx, q.Image.Tagged())
		if err != nil {
			return port.PulledImage{}, q.Err(pullErr(err, credErr))
		}
		if err := q.CheckTag(desc.Digest.String()); err != nil {
			return port.PulledImage{}, err
		}
	}
	img, err := r.cli.Pull(ctx, q.Local, client.WithResolver(resolver), client.WithPullUnpack, client.WithPullSnapshotter(r.cfg.snapshotter))
	if err != nil {
		return port.PulledImage{}, q.Err(pullErr(err, credErr))
	}
	got := img.Target().Digest
	if err := q.CheckPulled(got.String()); err != nil {
		return port.PulledImage{}, err
	}
	r.cfg.logger.Debug("image pulled", "ref", q.Local, "digest", got.String())
	return port.PulledImage{Ref: img.Name(), Digest: got.String(), Pulled: true}, nil
}

var quiet = func() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}()

func pullErr(err, credErr error) error {
	if credErr != nil {
		return credErr
	}
	return imagepull.Classify(classify(err))
}

// WithPullPolicy makes the runner pull each run's, session's and pool's image from its
// registry by policy before using it (default port.PullNever: only images already
// imported into the namespace). See PullImage.
func WithPullPolicy(p port.PullPolicy) Option {
	return func(c *config) error { return imagepull.SetPolicy(&c.pullPolicy, p) }
}

// WithRegistryCredentials gives the runner's pulls their registries' credentials,
// asked at each pull and held by this process only; no sandbox sees them.
func WithRegistryCredentials(creds port.RegistryCredentials) Option {
	return func(c *config) error { return imagepull.SetCredentials(&c.registryCreds, creds) }
}
