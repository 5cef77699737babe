package proxyd

import (
	"context"
	"fmt"

	"github.com/agentsandbox/sandbox/agentimage"
)

// ImageName is the repository of the daemon's image (Image).
const ImageName = "agentsandbox/proxyd"

// DaemonPackage is the import path of the daemon's main package.
const DaemonPackage = "github.com/agentsandbox/sandbox/cmd/sandbox-proxyd"

// Image builds the daemon as a static binary in a scratch image (no registry
// needed: load the archive with `docker load`, `ctr images import` or a runner's
// LoadImage) and returns its content-derived reference and the archive. Run it as
// root with the socket and state directories mounted at the same paths as on
// the host, so the socket paths it answers are the host's; arguments are the
// daemon's flags. It needs the go command and this module's sources.
func Image(ctx context.Context) (ref string, archive []byte, err error) {
	bin, err := agentimage.BuildGo(ctx, DaemonPackage)
	if err != nil {
		return "", nil, fmt.Errorf("proxyd: build the daemon: %w", err)
	}
	img := agentimage.Static(ImageName, bin)
	img.Env = append(img.Env, "TMPDIR=/tmp")
	return img.Archive()
}
