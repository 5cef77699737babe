package agentimage

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/agentsandbox/sandbox/errdefs"
)

// Dir returns the tree of the host directory src as files under dst in an image, to
// append to Image.Files: directories, regular files (their Source, read when the
// archive is written) with their permission bits (setuid and sticky included), and
// symbolic links as links. Every entry is owned
// by root, so the sandbox user can read and execute what the modes allow and change
// nothing. dst itself is included; its parents are not. Other file types (devices,
// sockets, pipes) give an error wrapping errdefs.ErrInvalidSpec.
func Dir(src, dst string) ([]File, error) { return dirFiltered(src, dst, nil) }

// dirFiltered is Dir without the entries skip reports (by their path relative to
// src, with forward slashes); a skipped directory is not entered.
func dirFiltered(src, dst string, skip func(rel string) bool) ([]File, error) {
	if !path.IsAbs(dst) {
		return nil, errdefs.Invalidf("agentimage: target %q is not absolute", dst)
	}
	dst = path.Clean(dst)
	var files []File
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if skip != nil && rel != "." && skip(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		if target == "/" {
			return nil // the root exists in every image
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		f := File{Path: target, Mode: mode.Perm() | mode&(fs.ModeSetuid|fs.ModeSticky)}
		switch {
		case mode.IsDir():
			f.Dir = true
		case mode&fs.ModeSymlink != 0:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case mode.IsRegular():
			f.Source = p // read when the archive is written
		default:
			return errdefs.Invalidf("agentimage: %s is a %v, not a file, directory or link", p, mode.Type())
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("agentimage: packing %s: %w", src, err)
	}
	return files, nil
}

// readSources reads each file's Source into its Data (for files whose source is about
// to go away).
func readSources(files []File) error {
	for i := range files {
		if files[i].Source == "" {
			continue
		}
		b, err := os.ReadFile(files[i].Source)
		if err != nil {
			return fmt.Errorf("agentimage: %s: %w", files[i].Path, err)
		}
		files[i].Data, files[i].Source = b, ""
	}
	return nil
}
