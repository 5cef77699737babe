package containerd

import (
	"context"
	"fmt"
	"io"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	clog "github.com/containerd/log"
	"github.com/sirupsen/logrus"

	"github.com/agentsandbox/sandbox/internal/imageref"
	"github.com/agentsandbox/sandbox/internal/pullutil"
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

// ensureImage applies the runner's pull policy to a run's image and returns the name
// to look it up by (name@digest for a pinned reference).
func (r *Runner) ensureImage(ctx context.Context, ref string) (string, error) {
	if r.cfg.pullPolicy == "" || r.cfg.pullPolicy == port.PullNever {
		return ref, nil
	}
	p, err := r.pull(ctx, ref, r.cfg.pullPolicy)
	if err != nil {
		return "", err
	}
	return p.Ref, nil
}

func (r *Runner) pull(ctx context.Context, ref string, policy port.PullPolicy) (port.PulledImage, error) {
	if err := policy.Validate(); err != nil {
		return port.PulledImage{}, err
	}
	ir, err := imageref.Parse(ref)
	if err != nil {
		return port.PulledImage{}, err
	}
	pe := func(err error) error { return &port.PullError{Ref: ref, Registry: ir.Domain, Err: err} }
	local := ir.Tagged()
	if ir.Digest != "" {
		local = ir.Pinned()
	}
	if policy != port.PullAlways {
		if i, err := r.cli.ImageService().Get(ctx, local); err == nil {
			ok, uerr := client.NewImage(r.cli, i).IsUnpacked(ctx, r.cfg.snapshotter)
			if uerr == nil && ok && (ir.Digest == "" || i.Target.Digest == ir.Digest) {
				return port.PulledImage{Ref: local, Digest: i.Target.Digest.String()}, nil
			}
		}
		if policy == port.PullNever || policy == "" {
			return port.PulledImage{}, pe(fmt.Errorf("%w: image %s is not in namespace %s and the pull policy is %s", port.ErrNotFound, local, r.cfg.namespace, port.PullNever))
		}
	}
	// The resolver logs every refused request to logrus's standard logger (stderr);
	// this library logs nothing unless given a logger, and the error says it all.
	ctx = clog.WithLogger(ctx, quiet)
	var credErr error
	auth := docker.NewDockerAuthorizer(docker.WithAuthCreds(func(host string) (string, string, error) {
		a, ok, err := pullutil.Auth(ctx, r.cfg.registryCreds, host)
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
	if ir.Digest != "" && ir.Tag != "" {
		_, desc, err := resolver.Resolve(ctx, ir.Tagged())
		if err != nil {
			return port.PulledImage{}, pe(pullErr(err, credErr))
		}
		if desc.Digest != ir.Digest {
			return port.PulledImage{}, pe(pullutil.Mismatch(ir.Tagged(), ir.Digest.String(), desc.Digest.String()))
		}
	}
	img, err := r.cli.Pull(ctx, local, client.WithResolver(resolver), client.WithPullUnpack, client.WithPullSnapshotter(r.cfg.snapshotter))
	if err != nil {
		return port.PulledImage{}, pe(pullErr(err, credErr))
	}
	got := img.Target().Digest
	if ir.Digest != "" && got != ir.Digest {
		return port.PulledImage{}, pe(pullutil.Mismatch(local, ir.Digest.String(), got.String()))
	}
	r.cfg.logger.Debug("image pulled", "ref", local, "digest", got.String())
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
	return pullutil.Classify(classify(err))
}

// WithPullPolicy makes the runner pull each run's, session's and pool's image from its
// registry by policy before using it (default port.PullNever: only images already
// imported into the namespace). See PullImage.
func WithPullPolicy(p port.PullPolicy) Option {
	return func(c *config) error {
		if err := p.Validate(); err != nil {
			return err
		}
		c.pullPolicy = p
		return nil
	}
}

// WithRegistryCredentials gives the runner's pulls their registries' credentials,
// asked at each pull and held by this process only; no sandbox sees them.
func WithRegistryCredentials(creds port.RegistryCredentials) Option {
	return func(c *config) error {
		if creds == nil {
			return port.Invalidf("registry credentials are nil")
		}
		c.registryCreds = creds
		return nil
	}
}
