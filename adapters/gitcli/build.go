package gitcli

import (
	"context"
	"fmt"

	"github.com/agentsandbox/sandbox/internal/gobuild"
)

// ExporterPackage is the import path of the exporter's main package.
const ExporterPackage = "github.com/agentsandbox/sandbox/cmd/sandbox-git-export"

// BuildExporter compiles cmd/sandbox-git-export as a static Linux binary (CGO_ENABLED=0,
// -trimpath, stripped, for the host's architecture) into outDir and returns its path.
//
// The file is named after a hash of every source file that goes into it (this module's
// and its dependencies') and of the Go version, so a call finds an up-to-date binary
// from an earlier process without building, and a changed source gives a new file.
// Within one process, later calls for the same outDir return at once. It needs the go
// command and the module's sources, so it serves tests and the project's scripts, not
// production hosts (which ship the binary).
func BuildExporter(ctx context.Context, outDir string) (string, error) {
	p, err := gobuild.Cached(ctx, ExporterPackage, "sandbox-git-export", outDir)
	if err != nil {
		return "", fmt.Errorf("gitcli: build: %w", err)
	}
	return p, nil
}
