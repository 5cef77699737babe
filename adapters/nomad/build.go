package nomad

import (
	"context"
	"fmt"

	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/internal/gobuild"
)

// Main packages of the binaries the runner puts on client nodes.
const (
	// InitPackage is sandbox-nomad-init (see WithInit).
	InitPackage = "github.com/agentsandbox/sandbox/cmd/sandbox-nomad-init"
	// ProxyPackage is sandbox-llmproxy, the sidecar's program (see ProxyImage).
	ProxyPackage = "github.com/agentsandbox/sandbox/cmd/sandbox-llmproxy"
	// ProxyImageName is the repository of the image ProxyImage builds.
	ProxyImageName = "agentsandbox/llmproxy"
)

// BuildInit compiles sandbox-nomad-init as a static binary into dir (cached by
// content, as bridge.Build does) and returns its path, for WithInit. Copy it to the
// same path on every client node (a one-machine cluster can use it as is).
func BuildInit(ctx context.Context, dir string) (string, error) {
	p, err := gobuild.Cached(ctx, InitPackage, "sandbox-nomad-init", dir)
	if err != nil {
		return "", fmt.Errorf("nomad: building the init: %w", err)
	}
	return p, nil
}

// ProxyImage builds the sidecar proxy's image (sandbox-llmproxy in a FROM scratch
// image, agentimage.Static) and returns its reference, for WithProxyImage, and its
// archive (the `docker save` format): load it into the Docker engine of every client
// node (there is no registry to pull it from).
func ProxyImage(ctx context.Context) (ref string, archive []byte, err error) {
	bin, err := gobuild.StaticBytes(ctx, gobuild.ModuleDir(), ProxyPackage)
	if err != nil {
		return "", nil, fmt.Errorf("nomad: building the proxy: %w", err)
	}
	return agentimage.Static(ProxyImageName, bin).Archive()
}
