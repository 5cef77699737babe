package agentimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"path"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/agentsandbox/sandbox/errdefs"
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

// A repository name as Docker and containerd accept it: lowercase path components
// with an optional registry host.
var nameRe = regexp.MustCompile(`^([A-Za-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$`)

// A tag as Docker and containerd accept it.
var tagRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

var epoch = time.Unix(0, 0).UTC()

// Archive packs img as a Docker image archive (the `docker save` format), which both
// runners' LoadImage methods, `docker load` and `ctr images import` accept. The tag is
// derived from the content, so the same inputs always give the same reference (and a
// runtime that has the reference has the content); it returns that reference and the
// archive bytes. A bad name or file path gives an error wrapping errdefs.ErrInvalidSpec.
func (img Image) Archive() (ref string, archive []byte, err error) {
	if !nameRe.MatchString(img.Name) {
		return "", nil, errdefs.Invalidf("agentimage: image name %q is not a repository name (lowercase, no tag)", img.Name)
	}
	if img.Tag != "" && !tagRe.MatchString(img.Tag) {
		return "", nil, errdefs.Invalidf("agentimage: tag %q is not a tag ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})", img.Tag)
	}
	labels := map[string]string{}
	for k, v := range img.Labels {
		if k == "" || k == ImageLabel || strings.ContainsFunc(k+v, func(r rune) bool { return !unicode.IsPrint(r) }) {
			return "", nil, errdefs.Invalidf("agentimage: label %q=%q is empty, reserved or not printable", k, v)
		}
		labels[k] = v
	}
	labels[ImageLabel] = "agentimage"
	layer, err := layerTar(img.Files)
	if err != nil {
		return "", nil, err
	}
	layerSum := sha256.Sum256(layer)
	diffID := "sha256:" + hex.EncodeToString(layerSum[:])
	cfg, err := json.Marshal(map[string]any{
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
		return "", nil, err
	}
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	ref = img.Name + ":" + hex.EncodeToString(cfgSum[:])[:16]
	if img.Tag != "" {
		ref = img.Name + ":" + img.Tag
	}
	layerName := hex.EncodeToString(layerSum[:]) + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{ref}, "Layers": []string{layerName}}})
	if err != nil {
		return "", nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		data []byte
	}{{cfgName, cfg}, {layerName, layer}, {"manifest.json", manifest}} {
		if dir := path.Dir(e.name); dir != "." {
			if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
				return "", nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch}); err != nil {
			return "", nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return "", nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return "", nil, err
	}
	return ref, buf.Bytes(), nil
}

func layerTar(files []File) ([]byte, error) {
	files = append([]File(nil), files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return nil, errdefs.Invalidf("agentimage: path %q is not absolute", f.Path)
		}
		h := &tar.Header{Name: f.Path[1:], Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID, ModTime: epoch, Format: tar.FormatPAX}
		if f.Mode&fs.ModeSetuid != 0 {
			h.Mode |= 0o4000
		}
		if f.Mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
