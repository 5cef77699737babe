package testimages

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/agentsandbox/sandbox/agentimage"
)

// CurlMountDir is where tests mount the directory CurlDir fills.
const CurlMountDir = "/opt/curl"

// CurlDir copies the host's curl and the shared libraries it links into dir, flat, so
// a sandbox whose image has the dynamic loader (the node image has) runs it as
// CurlMountDir/curl with LD_LIBRARY_PATH=CurlMountDir.
func CurlDir(ctx context.Context, dir string) error {
	bin, err := exec.LookPath("curl")
	if err != nil {
		return fmt.Errorf("testimages: curl not installed: %w", err)
	}
	files, err := hostBinary(ctx, bin, "/curl")
	if err != nil {
		return err
	}
	for _, f := range files {
		if f.Dir {
			continue
		}
		if err := copyFile(f, filepath.Join(dir, filepath.Base(f.Path))); err != nil {
			return err
		}
	}
	return nil
}

// copyFile writes f's content (its Data or Source) to dst, executable.
func copyFile(f agentimage.File, dst string) error {
	r, err := f.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, r)
	return errors.Join(err, w.Close())
}
