package testimages

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f.Path)), f.Data, 0o755); err != nil {
			return err
		}
	}
	return nil
}
