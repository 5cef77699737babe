// Package testimages builds the project's test images locally, with no registry and no
// Dockerfile: a static Go binary is compiled and packed, with exact modes and owners,
// into a Docker image archive that both Docker (ImageLoad) and containerd (Import) load.
package testimages

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"time"
)

// File is one entry of an image's single layer.
type File struct {
	Path     string // absolute path in the image
	Mode     fs.FileMode
	UID, GID int
	Data     []byte
	Dir      bool
}

// Image describes a single-layer image.
type Image struct {
	Name       string // repository, e.g. "agentsandbox/testagent"
	Entrypoint []string
	Env        []string
	User       string
	Files      []File
}

var epoch = time.Unix(0, 0).UTC()

// Archive packs img as a Docker image archive (the `docker save` format). The tag is
// derived from the content, so the same inputs always give the same reference; it
// returns that reference and the archive bytes.
func Archive(img Image) (ref string, archive []byte, err error) {
	layer, err := layerTar(img.Files)
	if err != nil {
		return "", nil, err
	}
	layerSum := sha256.Sum256(layer)
	diffID := "sha256:" + hex.EncodeToString(layerSum[:])
	cfg, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": img.Entrypoint,
			"Env":        img.Env,
			"User":       img.User,
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "agentsandbox testimages"}},
	})
	if err != nil {
		return "", nil, err
	}
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	ref = img.Name + ":" + hex.EncodeToString(cfgSum[:])[:16]
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
			return nil, fmt.Errorf("testimages: path %q is not absolute", f.Path)
		}
		h := &tar.Header{Name: f.Path[1:], Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID, ModTime: epoch, Format: tar.FormatPAX}
		if f.Mode&fs.ModeSetuid != 0 {
			h.Mode |= 0o4000
		}
		if f.Mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if f.Dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
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
