package testimages

import (
	"context"

	"github.com/agentsandbox/sandbox/agentimage"
)

// NginxImageName is the repository of the locally built nginx proxy image.
const NginxImageName = agentimage.NginxName

// NginxImage packs the host's nginx into an image (agentimage.Nginx), so the Docker
// proxy adapter is tested against a real nginx with no registry.
func NginxImage(ctx context.Context) (agentimage.Image, error) {
	img, err := agentimage.Nginx(ctx)
	img.Labels = map[string]string{agentimage.TestImageLabel: "testimages"}
	return img, err
}

// hostBinary packs a dynamically linked host binary (agentimage.HostBinary).
func hostBinary(ctx context.Context, bin, target string) ([]agentimage.File, error) {
	return agentimage.HostBinary(ctx, bin, target)
}

// withDirs adds missing directories (agentimage.WithDirs).
func withDirs(files []agentimage.File, dirs ...string) []agentimage.File {
	return agentimage.WithDirs(files, dirs...)
}

// NginxArchive builds the nginx image archive.
func NginxArchive(ctx context.Context) (ref string, archive []byte, err error) {
	img, err := NginxImage(ctx)
	if err != nil {
		return "", nil, err
	}
	return img.Archive()
}
