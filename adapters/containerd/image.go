package containerd

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// imageInfo is what a run needs from an image, read once per digest: the unpacked
// root's chain ID (the snapshot parent) and the image's config. A run then costs one
// image lookup (to see what the name points at now) instead of a dozen content reads
// and two mounts of the root filesystem (containerd's WithImageConfig reads /etc/group
// from it for supplementary groups, which our numeric users never have).
type imageInfo struct {
	name    string
	chainID string
	config  ocispec.ImageConfig
}

// defaultUnixEnv is containerd's PATH for images that set no environment.
var defaultUnixEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// imageInfo finds ref in the namespace, as given or as normalised
// (docker.io/library/...), and returns its cached info, unpacking it first if needed.
func (r *Runner) imageInfo(ctx context.Context, ref string) (*imageInfo, error) {
	is := r.cli.ImageService()
	i, err := is.Get(ctx, ref)
	if errdefs.IsNotFound(err) {
		if named, perr := reference.ParseNormalizedNamed(ref); perr == nil {
			i, err = is.Get(ctx, reference.TagNameOnly(named).String())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, classify(err))
	}
	key := i.Name + "@" + i.Target.Digest.String()
	if v, ok := r.images.Load(key); ok {
		return v.(*imageInfo), nil
	}
	img := client.NewImage(r.cli, i)
	ok, err := img.IsUnpacked(ctx, r.cfg.snapshotter)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, classify(err))
	}
	if !ok {
		if err := img.Unpack(ctx, r.cfg.snapshotter); err != nil {
			return nil, fmt.Errorf("unpack %q: %w", ref, classify(err))
		}
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, classify(err))
	}
	desc, err := img.Config(ctx)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, classify(err))
	}
	if !images.IsConfigType(desc.MediaType) {
		return nil, fmt.Errorf("image %q: unknown config media type %s", ref, desc.MediaType)
	}
	blob, err := content.ReadBlob(ctx, img.ContentStore(), desc)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, classify(err))
	}
	var oi ocispec.Image
	if err := json.Unmarshal(blob, &oi); err != nil {
		return nil, fmt.Errorf("image %q: config: %w", ref, err)
	}
	info := &imageInfo{name: i.Name, chainID: identity.ChainID(diffIDs).String(), config: oi.Config}
	r.images.Store(key, info)
	return info, nil
}

// forget drops a cached image, e.g. when its unpacked layers were removed under us.
func (r *Runner) forget(info *imageInfo) {
	r.images.Range(func(k, v any) bool {
		if v == info {
			r.images.Delete(k)
		}
		return true
	})
}

// withSnapshot prepares the container's writable snapshot on the image's cached
// chain ID (client.WithNewSnapshot without re-reading the image).
func (r *Runner) withSnapshot(key string, info *imageInfo, opts ...snapshots.Opt) client.NewContainerOpts {
	return func(ctx context.Context, _ *client.Client, c *containers.Container) error {
		if _, err := r.cli.SnapshotService(r.cfg.snapshotter).Prepare(ctx, key, info.chainID, opts...); err != nil {
			return err
		}
		c.Image = info.name
		c.Snapshotter = r.cfg.snapshotter
		c.SnapshotKey = key
		return nil
	}
}

// withImageConfig applies the image's environment, command and working directory as
// oci.WithImageConfig does for Linux, from the cache. The user is always set after it
// (WithUIDGID), so the image's is not resolved.
func withImageConfig(info *imageInfo) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		env := info.config.Env
		if len(env) == 0 {
			env = defaultUnixEnv
		}
		s.Process.Env = append([]string(nil), env...)
		s.Process.Args = append(append([]string(nil), info.config.Entrypoint...), info.config.Cmd...)
		s.Process.Cwd = info.config.WorkingDir
		if s.Process.Cwd == "" {
			s.Process.Cwd = "/"
		}
		return nil
	}
}
