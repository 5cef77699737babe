package agentimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/internal/countio"
)

// File is one entry of an image's single layer.
type File struct {
	// Path is the absolute path in the image.
	Path string
	// Mode holds the permission bits plus fs.ModeSetuid and fs.ModeSticky; other
	// type bits are ignored (Dir says what the entry is).
	Mode fs.FileMode
	// UID and GID own the entry; zero (root) unless set.
	UID, GID int
	// Data is a regular file's content.
	Data []byte
	// Source, if set instead of Data, is the host path of a regular file whose
	// content is the entry's, read when the archive is written (streamed: an image's
	// size is not held in memory). It must not change until the archive is written:
	// WriteTo reads it twice and fails if it did. Dir and HostBinary set it.
	Source string
	// Dir makes the entry a directory.
	Dir bool
	// Link, if set, makes the entry a symbolic link to Link.
	Link string
}

// Image describes a single-layer image for the host's architecture.
type Image struct {
	// Name is the repository, such as "example.com/my-agent"; the tag is derived
	// from the content by Archive, unless Tag names one.
	Name string
	// Tag, if set, is the image's tag ("latest", "v1") instead of the one derived
	// from the content: a name a program can hold while the content changes.
	Tag string
	// Entrypoint is the image's ENTRYPOINT. A run's argv, when given, replaces it.
	Entrypoint []string
	// Env is the image's environment, as KEY=value.
	Env []string
	// User is the default user, as "uid:gid"; empty means root, which the runners
	// never use (they run every sandbox as a non-root user).
	User string
	// Files is the single layer's content. Parent directories are not implied.
	Files []File
	// Labels are added to the image's config labels (ImageLabel is always set and
	// cannot be replaced). Keys and values must be printable, without NUL.
	Labels map[string]string
}

// Command returns the command line that runs the image's entrypoint with args after
// it, for RunSpec.Argv (a non-empty Argv replaces the entrypoint on every runner): an
// agent gets its arguments without its caller restating its interpreter and script
// (for a Node agent, Command("--task", "x") is ["/usr/local/bin/node",
// "/app/agent.mjs", "--task", "x"]).
func (img Image) Command(args ...string) []string {
	return append(append(make([]string, 0, len(img.Entrypoint)+len(args)), img.Entrypoint...), args...)
}

// A repository name as Docker and containerd accept it: lowercase path components
// with an optional registry host.
var nameRe = regexp.MustCompile(`^([A-Za-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$`)

// A tag as Docker and containerd accept it.
var tagRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

var epoch = time.Unix(0, 0).UTC()

// Open returns the entry's content: Data, or the Source file (which must be a regular
// file). Close it.
func (f File) Open() (io.ReadCloser, error) {
	if f.Source == "" {
		return io.NopCloser(bytes.NewReader(f.Data)), nil
	}
	r, err := os.Open(f.Source)
	if err != nil {
		return nil, fmt.Errorf("agentimage: %s: %w", f.Path, err)
	}
	if fi, err := r.Stat(); err != nil || !fi.Mode().IsRegular() {
		r.Close()
		return nil, errdefs.Invalidf("agentimage: %s: source %s is not a regular file", f.Path, f.Source)
	}
	return r, nil
}

// ErrChanged is the error of an image whose Source file changed while its archive was
// written (WriteTo reads each twice: to hash, then to write).
var ErrChanged = errors.New("agentimage: a source file changed while the archive was written")

// packed is what an archive holds besides its layer: the layer's digest and size (from
// a first pass over the files), the config and the manifest.
type packed struct {
	ref                string
	cfg, manifest      []byte
	cfgName, layerName string
	layerSum           [sha256.Size]byte
	layerSize          int64
	files              []File
}

// pack checks img and makes everything but the layer, which it streams once through
// a hash to learn its digest and size.
func (img Image) pack() (*packed, error) {
	if !nameRe.MatchString(img.Name) {
		return nil, errdefs.Invalidf("agentimage: image name %q is not a repository name (lowercase, no tag)", img.Name)
	}
	if img.Tag != "" && !tagRe.MatchString(img.Tag) {
		return nil, errdefs.Invalidf("agentimage: tag %q is not a tag ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})", img.Tag)
	}
	labels := map[string]string{}
	for k, v := range img.Labels {
		if k == "" || k == ImageLabel || strings.ContainsFunc(k+v, func(r rune) bool { return !unicode.IsPrint(r) }) {
			return nil, errdefs.Invalidf("agentimage: label %q=%q is empty, reserved or not printable", k, v)
		}
		labels[k] = v
	}
	labels[ImageLabel] = "agentimage"
	p := &packed{files: append([]File(nil), img.Files...)}
	sort.SliceStable(p.files, func(i, j int) bool { return p.files[i].Path < p.files[j].Path })
	h := sha256.New()
	n, err := writeLayer(h, p.files)
	if err != nil {
		return nil, err
	}
	copy(p.layerSum[:], h.Sum(nil))
	p.layerSize = n
	diffID := "sha256:" + hex.EncodeToString(p.layerSum[:])
	p.cfg, err = json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": img.Entrypoint,
			"Env":        img.Env,
			"User":       img.User,
			// Lets tooling find what this package built (the test suite removes them
			// before a run, to start as a new machine would).
			"Labels": labels,
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "agentsandbox agentimage"}},
	})
	if err != nil {
		return nil, err
	}
	cfgSum := sha256.Sum256(p.cfg)
	p.cfgName = hex.EncodeToString(cfgSum[:]) + ".json"
	p.ref = img.Name + ":" + hex.EncodeToString(cfgSum[:])[:16]
	if img.Tag != "" {
		p.ref = img.Name + ":" + img.Tag
	}
	p.layerName = hex.EncodeToString(p.layerSum[:]) + "/layer.tar"
	if p.manifest, err = json.Marshal([]map[string]any{{"Config": p.cfgName, "RepoTags": []string{p.ref}, "Layers": []string{p.layerName}}}); err != nil {
		return nil, err
	}
	return p, nil
}

// Ref returns the reference the image's archive carries (see Archive), reading every
// file once. Errors are Archive's.
func (img Image) Ref() (string, error) {
	p, err := img.pack()
	if err != nil {
		return "", err
	}
	return p.ref, nil
}

// WriteTo writes the image's archive (see Archive) to w, streaming each file's content,
// so memory does not grow with the image: it reads the files twice (to learn the
// layer's digest, then to write it) and returns an error wrapping ErrChanged if a
// Source file changed in between. Implements io.WriterTo. Errors wrap
// errdefs.ErrInvalidSpec for a bad name, path or label.
func (img Image) WriteTo(w io.Writer) (int64, error) {
	p, err := img.pack()
	if err != nil {
		return 0, err
	}
	return p.writeArchive(w)
}

// Open returns the image's reference and its archive as a stream, written while it is
// read, for a runner's LoadImage (which takes an io.Reader): the image is not held in
// memory. The files are read once before Open returns (for the reference) and again
// while the stream is read; a read error (ErrChanged among them) is the stream's.
// Close the stream, read to its end or not, to stop the writer.
func (img Image) Open() (ref string, archive io.ReadCloser, err error) {
	p, err := img.pack()
	if err != nil {
		return "", nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := p.writeArchive(pw)
		pw.CloseWithError(err)
	}()
	return p.ref, pr, nil
}

// Archive packs img as a Docker image archive (the `docker save` format), which both
// runners' LoadImage methods, `docker load` and `ctr images import` accept. The tag is
// derived from the content, so the same inputs always give the same reference (and a
// runtime that has the reference has the content); it returns that reference and the
// archive bytes. It holds the whole archive in memory: for an image of more than a few
// megabytes use Open (a stream for LoadImage) or WriteTo. A bad name or file path
// gives an error wrapping errdefs.ErrInvalidSpec.
func (img Image) Archive() (ref string, archive []byte, err error) {
	p, err := img.pack()
	if err != nil {
		return "", nil, err
	}
	var buf bytes.Buffer
	if _, err := p.writeArchive(&buf); err != nil {
		return "", nil, err
	}
	return p.ref, buf.Bytes(), nil
}

// writeArchive writes the archive: the config, the layer (streamed from the files, and
// checked against the first pass's digest) and the manifest.
func (p *packed) writeArchive(w io.Writer) (int64, error) {
	cw := &countio.Writer{W: w}
	tw := tar.NewWriter(cw)
	entry := func(name string, size int64) error {
		if dir := path.Dir(name); dir != "." {
			if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
				return err
			}
		}
		return tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: epoch})
	}
	if err := entry(p.cfgName, int64(len(p.cfg))); err != nil {
		return cw.N, err
	}
	if _, err := tw.Write(p.cfg); err != nil {
		return cw.N, err
	}
	if err := entry(p.layerName, p.layerSize); err != nil {
		return cw.N, err
	}
	h := sha256.New()
	if _, err := writeLayer(io.MultiWriter(tw, h), p.files); err != nil {
		if errors.Is(err, tar.ErrWriteTooLong) {
			err = fmt.Errorf("%w: %w", ErrChanged, err)
		}
		return cw.N, err
	}
	if !bytes.Equal(h.Sum(nil), p.layerSum[:]) {
		return cw.N, ErrChanged
	}
	if err := entry("manifest.json", int64(len(p.manifest))); err != nil {
		return cw.N, err
	}
	if _, err := tw.Write(p.manifest); err != nil {
		return cw.N, err
	}
	err := tw.Close()
	return cw.N, err
}

// writeLayer writes the single layer's tar of files (sorted) to w and returns its
// size, reading each Source as it goes.
func writeLayer(w io.Writer, files []File) (int64, error) {
	cw := &countio.Writer{W: w}
	tw := tar.NewWriter(cw)
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return cw.N, errdefs.Invalidf("agentimage: path %q is not absolute", f.Path)
		}
		h := &tar.Header{Name: f.Path[1:], Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID, ModTime: epoch, Format: tar.FormatPAX}
		if f.Mode&fs.ModeSetuid != 0 {
			h.Mode |= 0o4000
		}
		if f.Mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		var content io.ReadCloser
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			r, err := f.Open()
			if err != nil {
				return cw.N, err
			}
			content = r
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
			if f.Source != "" {
				fi, err := r.(*os.File).Stat()
				if err != nil {
					r.Close()
					return cw.N, err
				}
				h.Size = fi.Size()
			}
		}
		err := tw.WriteHeader(h)
		if err == nil && content != nil {
			var n int64
			n, err = io.Copy(tw, content)
			if err == nil && n != h.Size {
				err = fmt.Errorf("%w: %s", ErrChanged, f.Path)
			}
		}
		if content != nil {
			content.Close()
		}
		if err != nil {
			return cw.N, err
		}
	}
	err := tw.Close()
	return cw.N, err
}
