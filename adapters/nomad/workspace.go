package nomad

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
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

// The copied workspace (WithWorkspaceCopy): a tmpfs of the run's size at /workspace
// in the sandbox's container, which the init fills from the input before the agent
// starts and sends back as a tar archive on the task's stderr once it has ended.
const (
	// workspaceFSPath is the root of the paths copyBack walks.
	workspaceFSPath = "workspace"
	// workspaceTar is where the agent task's template renders the input (its local/,
	// hidden from the sandbox), and workspaceTarTarget where that file is bound
	// read-only for the init.
	workspaceTar       = "local/workspace.tar"
	workspaceTarTarget = "/.agentsandbox/workspace.tar"
)

// exportMax is the most bytes of archive the init sends back: the tmpfs's content
// (at most what copyBack takes) and a header and padding per file.
func exportMax(spec port.RunSpec) int64 {
	return min(spec.Limits.TmpfsBytes, MaxWorkspaceOut) + 2<<10*int64(MaxWorkspaceFiles) + 4<<10
}

// exportFramedSize bounds the export frames (and their last line) that carry n bytes
// of archive: base64, plus a '!' and a newline per frame of at most 8 KiB (the init
// buffers the archive; small frames only at its end).
func exportFramedSize(n int64) int64 { return 4*(n/3+1) + 2*(n/1024+8) + 4<<10 }

// splitExport takes the init's export frames out of b (the raw stderr log): the rest,
// and the archive they carry. The archive is complete only when its "!end" line
// came; "!over" and "!failed" lines say why it did not.
func splitExport(b []byte) (rest, archive []byte, err error) {
	err = errors.New("the sandbox's workspace did not come back (no end of the archive)")
	for len(b) > 0 {
		line, next, found := bytes.Cut(b, []byte("\n"))
		if !found || len(line) == 0 || line[0] != '!' {
			if found {
				rest = append(rest, b[:len(line)+1]...)
			} else {
				rest = append(rest, b...)
			}
			b = next
			continue
		}
		b = next
		switch body := string(line[1:]); {
		case body == "end":
			err = nil
		case strings.HasPrefix(body, "over "):
			err = fmt.Errorf("the sandbox's workspace is too large to copy back: %s", strings.TrimPrefix(body, "over "))
		case strings.HasPrefix(body, "failed "):
			err = fmt.Errorf("the sandbox's workspace could not be sent back: %s", strings.TrimPrefix(body, "failed "))
		default:
			dec := make([]byte, base64.StdEncoding.DecodedLen(len(body)))
			n, derr := base64.StdEncoding.Decode(dec, []byte(body))
			if derr != nil {
				return rest, nil, fmt.Errorf("the sandbox's workspace came back mangled: %v", derr)
			}
			archive = append(archive, dec[:n]...)
		}
	}
	return rest, archive, err
}

// tarFiles is an exported workspace archive seen as the file system copyBack walks:
// directories list their entries, regular files read their content. Names are
// checked by copyBack.
type tarFiles struct {
	dirs  map[string][]*api.AllocFileInfo
	files map[string][]byte
}

func newTarFiles(archive []byte) (tarFiles, error) {
	t := tarFiles{dirs: map[string][]*api.AllocFileInfo{}, files: map[string][]byte{}}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return t, nil
		}
		if err != nil {
			return t, fmt.Errorf("the sandbox's workspace archive: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		dir, base := path.Split(name)
		dir = path.Join(workspaceFSPath, dir)
		full := path.Join(workspaceFSPath, name)
		switch h.Typeflag {
		case tar.TypeDir:
			t.dirs[dir] = append(t.dirs[dir], &api.AllocFileInfo{Name: base, IsDir: true, FileMode: "drwxr-xr-x"})
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return t, fmt.Errorf("the sandbox's workspace archive: %w", err)
			}
			t.files[full] = b
			t.dirs[dir] = append(t.dirs[dir], &api.AllocFileInfo{Name: base, Size: int64(len(b)), FileMode: "-rw-r--r--"})
		}
	}
}

func (t tarFiles) List(_ context.Context, p string) ([]*api.AllocFileInfo, error) {
	return t.dirs[p], nil
}
func (t tarFiles) Read(_ context.Context, p string, limit int64) ([]byte, error) {
	b, ok := t.files[p]
	if !ok {
		return nil, fmt.Errorf("%s: not in the archive", p)
	}
	return b[:min(int64(len(b)), limit)], nil
}

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
