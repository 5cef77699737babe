// Package testimages builds the images of the project's own tests that are not agents
// (agentimage packages those): a real nginx and a Node.js runtime packed from the
// host's binaries, with no registry and no Dockerfile.
package testimages

import (
	"bytes"
	"context"
	"fmt"

	"github.com/moby/moby/client"
)

// EnsureDocker loads the archive into the daemon unless an image with ref is there
// already (the tag is content-derived, so presence means identical content).
func EnsureDocker(ctx context.Context, cli *client.Client, ref string, archive []byte) error {
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return nil
	}
	rc, err := cli.ImageLoad(ctx, bytes.NewReader(archive), client.ImageLoadWithQuiet(true))
	if err != nil {
		return fmt.Errorf("testimages: load %s: %w", ref, err)
	}
	defer rc.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(rc)
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return fmt.Errorf("testimages: %s not present after load: %v: %s", ref, err, out.String())
	}
	return nil
}
