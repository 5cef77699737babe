package main

import (
	"archive/tar"
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// exportFrameMax is the most archive bytes in one export frame (a line under
// Docker's 16 KiB log buffer once encoded).
const exportFrameMax = 8 << 10

// exportFrames writes what it is given as export frames: '!' then base64, a line each.
type exportFrames struct{ w io.Writer }

func (f exportFrames) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i += exportFrameMax {
		chunk := p[i:min(i+exportFrameMax, len(p))]
		line := make([]byte, 1+base64.StdEncoding.EncodedLen(len(chunk))+1)
		line[0] = '!'
		base64.StdEncoding.Encode(line[1:], chunk)
		line[len(line)-1] = '\n'
		if _, err := f.w.Write(line); err != nil {
			return i, err
		}
	}
	return len(p), nil
}

// errOver is an export past its limits.
var errOver = errors.New("over the limit")

// capped fails a write that would take it past max bytes.
type capped struct {
	w   io.Writer
	n   int64
	max int64
}

func (c *capped) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.max {
		return 0, fmt.Errorf("%w: the workspace's archive is larger than %d bytes", errOver, c.max)
	}
	c.n += int64(len(p))
	return c.w.Write(p)
}

// exportDir writes dir's regular files and directories (read through os.Root; links
// and special files skipped) as a tar archive in export frames on w, then "!end", or
// "!over REASON" once the archive would pass maxBytes or maxFiles files, or "!failed
// REASON". A file the sandbox made unreadable to its own user is made readable (it
// is that user's); one that still cannot be read is skipped.
func exportDir(dir string, w io.Writer, maxBytes int64, maxFiles int) {
	bw := bufio.NewWriterSize(exportFrames{w}, exportFrameMax)
	err := writeTar(dir, &capped{w: bw, max: maxBytes}, maxFiles)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	switch {
	case err == nil:
		fmt.Fprint(w, "!end\n")
	case errors.Is(err, errOver):
		fmt.Fprintf(w, "!over %s\n", oneLine(err))
	default:
		fmt.Fprintf(w, "!failed %s\n", oneLine(err))
	}
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

func writeTar(dir string, w io.Writer, maxFiles int) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	files := 0
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return err
			}
			return nil // unreadable: skipped
		}
		if p == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if info.Mode().Perm()&0o500 != 0o500 {
				_ = root.Chmod(p, info.Mode().Perm()|0o700)
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: int64(info.Mode().Perm())})
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		if files++; files > maxFiles {
			return fmt.Errorf("%w: the workspace holds more than %d files", errOver, maxFiles)
		}
		f, err := root.Open(p)
		if err != nil {
			if root.Chmod(p, info.Mode().Perm()|0o400) != nil {
				return nil
			}
			if f, err = root.Open(p); err != nil {
				return nil
			}
		}
		defer f.Close()
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: int64(info.Mode().Perm()), Size: info.Size()}); err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, info.Size())
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
