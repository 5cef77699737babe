package docker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner/imagepull"
	"github.com/agentsandbox/sandbox/internal/runner/imageref"
	"github.com/agentsandbox/sandbox/port"
)

var _ port.ImagePuller = (*Runner)(nil)

// pullAPI is the part of the SDK pulls use besides apiClient.
type pullAPI interface {
	ImagePull(ctx context.Context, ref string, options client.ImagePullOptions) (client.ImagePullResponse, error)
	DistributionInspect(ctx context.Context, imageRef string, options client.DistributionInspectOptions) (client.DistributionInspectResult, error)
}

// PullImage implements port.ImagePuller: the daemon pulls ref with the credentials
// WithRegistryCredentials gives for its registry, sent in the pull request's header
// (never written to the daemon's config, never seen by a sandbox). A digest-pinned
// reference is pulled by digest (the daemon verifies the content); with a tag too,
// the tag must name that digest at the registry. Errors are *port.PullError (see
// port.ImagePuller).
func (r *Runner) PullImage(ctx context.Context, ref string, policy port.PullPolicy) (port.PulledImage, error) {
	p, err := r.pull(ctx, ref, policy)
	if err != nil {
		return port.PulledImage{}, opErr("PullImage", "", err)
	}
	return p, nil
}

// ensureImage applies the runner's pull policy to a run's image and returns the
// reference to create the container from (name@digest for a pinned reference).
func (r *Runner) ensureImage(ctx context.Context, ref string) (string, error) {
	return imagepull.Ensure(ctx, ref, r.cfg.pullPolicy, r.pull)
}

func (r *Runner) pull(ctx context.Context, ref string, policy port.PullPolicy) (port.PulledImage, error) {
	q, err := imagepull.NewRequest(ref, policy)
	if err != nil {
		return port.PulledImage{}, err
	}
	// local is the reference the daemon stores: by digest when pinned.
	ir, local, pe := q.Image, q.Local, q.Err
	if policy != port.PullAlways {
		if d, ok := r.present(ctx, local, ir); ok {
			return port.PulledImage{Ref: local, Digest: d}, nil
		}
		if policy == port.PullNever || policy == "" {
			return port.PulledImage{}, q.NotHeld("the engine's store")
		}
	}
	api, ok := r.cfg.api.(pullAPI)
	if !ok {
		return port.PulledImage{}, pe(fmt.Errorf("%w: this client cannot pull", port.ErrUnsupported))
	}
	auth, err := r.encodedAuth(ctx, ir.Domain)
	if err != nil {
		return port.PulledImage{}, pe(err)
	}
	if ir.Digest != "" && ir.Tag != "" {
		// The tag must name the pinned content now: otherwise the caller's two
		// statements about the image disagree, and neither silently wins.
		di, err := api.DistributionInspect(ctx, ir.Tagged(), client.DistributionInspectOptions{EncodedRegistryAuth: auth})
		if err != nil {
			return port.PulledImage{}, pe(imagepull.Classify(classify(err)))
		}
		if err := q.CheckTag(di.Descriptor.Digest.String()); err != nil {
			return port.PulledImage{}, err
		}
	}
	resp, err := api.ImagePull(ctx, local, client.ImagePullOptions{RegistryAuth: auth})
	if err != nil {
		return port.PulledImage{}, pe(imagepull.Classify(classify(err)))
	}
	err = resp.Wait(ctx)
	_ = resp.Close()
	if err != nil {
		return port.PulledImage{}, pe(imagepull.Classify(classify(err)))
	}
	d, ok := r.present(ctx, local, ir)
	if !ok {
		return port.PulledImage{}, pe(fmt.Errorf("%w: the daemon reported the pull of %s done but does not hold it", port.ErrInternal, local))
	}
	if err := q.CheckPulled(d); err != nil {
		return port.PulledImage{}, err
	}
	r.cfg.logger.Debug("image pulled", "ref", local, "digest", d)
	return port.PulledImage{Ref: local, Digest: d, Pulled: true}, nil
}

// present reports whether the daemon holds local and the repository digest it was
// pulled at (for a pinned reference, only that digest counts).
func (r *Runner) present(ctx context.Context, local string, ir imageref.Ref) (string, bool) {
	img, err := r.cfg.api.ImageInspect(ctx, local)
	if err != nil {
		return "", false
	}
	var digests []string
	for _, rd := range img.RepoDigests {
		if named, err := imageref.Parse(rd); err == nil && named.Name == ir.Name && named.Digest != "" {
			digests = append(digests, named.Digest.String())
		}
	}
	if ir.Digest != "" {
		if !slices.Contains(digests, ir.Digest.String()) {
			return "", false
		}
		return ir.Digest.String(), true
	}
	if len(digests) == 0 {
		return "", true // loaded from an archive: present, with no registry digest
	}
	return digests[0], true
}

// encodedAuth is the X-Registry-Auth header value for host ("" for anonymous).
func (r *Runner) encodedAuth(ctx context.Context, host string) (string, error) {
	a, ok, err := imagepull.Auth(ctx, r.cfg.registryCreds, host)
	if err != nil || !ok {
		return "", err
	}
	b, err := json.Marshal(struct {
		Username      string `json:"username,omitempty"`
		Password      string `json:"password,omitempty"`
		ServerAddress string `json:"serveraddress,omitempty"`
	}{a.Username, a.Password, host})
	if err != nil {
		return "", errors.New("encoding registry credentials")
	}
	return base64.URLEncoding.EncodeToString(b), nil
}

// WithPullPolicy makes the runner pull each run's and session's image from its
// registry by policy before creating the container (default port.PullNever: only
// images already loaded). See PullImage.
func WithPullPolicy(p port.PullPolicy) Option {
	return only(ctorRunner, "WithPullPolicy", func(c *config) error { return imagepull.SetPolicy(&c.pullPolicy, p) })
}

// WithRegistryCredentials gives the runner's pulls their registries' credentials. They
// go to the daemon in each pull request only; no sandbox sees them.
func WithRegistryCredentials(creds port.RegistryCredentials) Option {
	return only(ctorRunner, "WithRegistryCredentials", func(c *config) error { return imagepull.SetCredentials(&c.registryCreds, creds) })
}
