package nomad

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/port"
)

// The copied workspace (WithWorkspaceCopy): in the allocation's shared data directory,
// made by the prestart task that unpacks the input, mounted at /workspace.
const (
	workspaceTask = "workspace"
	// workspaceDir is relative to a task directory (../alloc is the shared directory).
	workspaceDir = "../alloc/data/workspace"
	// workspaceFSPath is the same directory for the file system API.
	workspaceFSPath = "alloc/data/workspace"
	// workspaceTar is where the unpacking task's template renders the input.
	workspaceTar = "local/workspace.tar"
)

// packWorkspace packs the regular files and directories of the host directory dir as
// a tar archive, read through os.Root so that nothing outside dir is read; links and
// other special files are skipped. It fails past max bytes of content.
func packWorkspace(dir string, max int64) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, port.Invalidf("workspace dir: %v", err)
	}
	defer root.Close()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var total int64
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: int64(info.Mode().Perm())})
		case !info.Mode().IsRegular():
			return nil
		}
		if total += info.Size(); total > max {
			return fmt.Errorf("%w: the workspace holds more than %d bytes, the limit for copying it into the cluster", port.ErrInvalidSpec, max)
		}
		f, err := root.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: int64(info.Mode().Perm()), Size: info.Size()}); err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, info.Size())
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		if errors.Is(err, port.ErrInvalidSpec) {
			return nil, err
		}
		return nil, fmt.Errorf("packing the workspace: %w", err)
	}
	return buf.Bytes(), nil
}

// allocFiles is the part of Nomad's file system API that copying back needs.
type allocFiles interface {
	List(ctx context.Context, path string) ([]*api.AllocFileInfo, error)
	Read(ctx context.Context, path string, limit int64) ([]byte, error)
}

type nomadFiles struct {
	r     *Runner
	alloc *api.Allocation
}

func (n nomadFiles) List(ctx context.Context, p string) ([]*api.AllocFileInfo, error) {
	l, _, err := n.r.api.AllocFS().List(n.alloc, p, (&api.QueryOptions{}).WithContext(ctx))
	return l, err
}

func (n nomadFiles) Read(ctx context.Context, p string, limit int64) ([]byte, error) {
	return n.r.readFile(ctx, n.alloc, p, limit)
}

// copyBack copies the workspace the sandbox left in its allocation into the host
// directory dir: regular files and directories only (a link the agent made is never
// followed on either side), written through os.Root so nothing lands outside dir,
// at most max bytes and maxFiles files. Files are added or overwritten; files the
// agent deleted stay on the host.
func copyBack(ctx context.Context, files allocFiles, dir string, max int64, maxFiles int) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var total int64
	var count int
	var walk func(rel string) error
	walk = func(rel string) error {
		entries, err := files.List(ctx, path.Join(workspaceFSPath, rel))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") {
				return fmt.Errorf("the workspace lists a file named %q", e.Name)
			}
			p := path.Join(rel, e.Name)
			switch {
			case e.IsDir && strings.HasPrefix(e.FileMode, "d"):
				if err := root.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
					return err
				}
				if err := walk(p); err != nil {
					return err
				}
			case strings.HasPrefix(e.FileMode, "-"):
				if count++; count > maxFiles {
					return fmt.Errorf("the workspace holds more than %d files", maxFiles)
				}
				if total += e.Size; total > max {
					return fmt.Errorf("the workspace holds more than %d bytes", max)
				}
				b, err := files.Read(ctx, path.Join(workspaceFSPath, p), e.Size)
				if err != nil {
					return err
				}
				if err := writeFile(root, p, b); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk("")
}

// writeFile replaces p under root with b. An existing link at p is removed first, so
// the write cannot go through it (os.Root would keep it inside root anyway).
func writeFile(root *os.Root, p string, b []byte) error {
	if fi, err := root.Lstat(p); err == nil && !fi.Mode().IsRegular() {
		if err := root.Remove(p); err != nil {
			return err
		}
	}
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
