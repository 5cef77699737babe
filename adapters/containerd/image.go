package containerd

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/agentsandbox/sandbox/internal/runner/imagepull"
	"github.com/agentsandbox/sandbox/port"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
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
	// The runner's pull policy; a pinned reference is looked up by name@digest.
	ref, err := imagepull.Ensure(ctx, ref, r.cfg.pullPolicy, r.pull)
	if err != nil {
		return nil, err
	}
	is := r.cli.ImageService()
	i, err := is.Get(ctx, ref)
	if errdefs.IsNotFound(err) {
		named, perr := reference.ParseNormalizedNamed(ref)
		if perr != nil {
			// Not stored as given and not a reference at all: bad input, as Docker's
			// daemon says of it (invalid reference format).
			return nil, fmt.Errorf("image %q: %w: %v", ref, port.ErrInvalidSpec, perr)
		}
		i, err = is.Get(ctx, reference.TagNameOnly(named).String())
	}
	if errdefs.IsNotFound(err) {
		return nil, imagepull.Missing(ref, "containerd namespace "+r.cfg.namespace, r.cfg.pullPolicy, nil)
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

// maxHashedEntry is the largest archive entry whose digest present hashes: configs
// and manifests are small; layers are not hashed.
const maxHashedEntry = 4 << 20

// present reports whether every image an archive names is already in the namespace,
// unpacked, with the same content, and returns their names: then LoadImage skips the
// import, which another process made already (the per-digest cache of imageInfo only
// helps within one process). It reads the archive once, hashing its small entries;
// anything it does not understand means "import".
//
// The content is compared by the image config's digest (a `docker save` archive,
// whose manifest containerd generates on import) or by the manifest's digest (an OCI
// layout whose index names the image). The config holds the layers' diff ids, so the
// same config digest is the same root filesystem.
func (r *Runner) present(ctx context.Context, archive io.Reader) ([]string, bool) {
	sums := map[string]digest.Digest{}
	files := map[string][]byte{}
	tr := tar.NewReader(archive)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false
		}
		if h.Typeflag != tar.TypeReg || h.Size > maxHashedEntry {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxHashedEntry))
		if err != nil {
			return nil, false
		}
		name := path.Clean(h.Name)
		sums[name] = digest.FromBytes(b)
		if name == "manifest.json" || name == "index.json" {
			files[name] = b
		}
	}
	type want struct {
		name         string
		config, root digest.Digest // one of them is set
	}
	var wants []want
	switch {
	case files["manifest.json"] != nil:
		var m []struct {
			Config   string
			RepoTags []string
		}
		if json.Unmarshal(files["manifest.json"], &m) != nil {
			return nil, false
		}
		for _, e := range m {
			cfg, ok := sums[path.Clean(e.Config)]
			if !ok || len(e.RepoTags) == 0 {
				return nil, false
			}
			for _, tag := range e.RepoTags {
				named, err := reference.ParseNormalizedNamed(tag)
				if err != nil {
					return nil, false
				}
				wants = append(wants, want{name: reference.TagNameOnly(named).String(), config: cfg})
			}
		}
	case files["index.json"] != nil:
		var idx ocispec.Index
		if json.Unmarshal(files["index.json"], &idx) != nil {
			return nil, false
		}
		for _, m := range idx.Manifests {
			name := m.Annotations[images.AnnotationImageName]
			if name == "" {
				return nil, false
			}
			wants = append(wants, want{name: name, root: m.Digest})
		}
	}
	if len(wants) == 0 {
		return nil, false
	}
	is := r.cli.ImageService()
	names := make([]string, 0, len(wants))
	for _, w := range wants {
		i, err := is.Get(ctx, w.name)
		if err != nil {
			return nil, false
		}
		img := client.NewImage(r.cli, i)
		if w.root != "" && i.Target.Digest != w.root {
			return nil, false
		}
		if w.config != "" {
			desc, err := img.Config(ctx)
			if err != nil || desc.Digest != w.config {
				return nil, false
			}
		}
		if ok, err := img.IsUnpacked(ctx, r.cfg.snapshotter); err != nil || !ok {
			return nil, false
		}
		names = append(names, i.Name)
	}
	return names, true
}

// seekable returns archive as an io.ReadSeeker: itself when it is one, else a copy in a
// temporary file that done removes.
func seekable(archive io.Reader) (rs io.ReadSeeker, done func(), err error) {
	if rs, ok := archive.(io.ReadSeeker); ok {
		if _, err := rs.Seek(0, io.SeekCurrent); err == nil {
			return rs, func() {}, nil
		}
	}
	f, err := os.CreateTemp("", "agentsandbox-image-*.tar")
	if err != nil {
		return nil, nil, err
	}
	done = func() { f.Close(); os.Remove(f.Name()) }
	if _, err := io.Copy(f, archive); err != nil {
		done()
		return nil, nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		done()
		return nil, nil, err
	}
	return f, done, nil
}
