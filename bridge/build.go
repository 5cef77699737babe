// Package bridge provides the in-sandbox LLM bridge, the binary the runners start as a
// sandbox's entrypoint (docker.WithBridge, containerd.WithBridge; sandbox.Open builds
// it for them): it listens on port.BridgeAddr inside the sandbox, forwards to the
// run's proxy socket, and runs the agent as its child. Without it an agent has no way
// to reach its LLM proxy.
//
// Build compiles it from this module's sources with the local Go toolchain, once per
// library version: a program that requires a released version of this module finds
// the binary an earlier process built by that version alone, without running the go
// command; a development build (this repository, a replace directive) hashes the
// sources instead. For hosts without a Go toolchain, seed the cache where there is
// one, at the same version (an image's build step):
//
//	go run github.com/agentsandbox/sandbox/cmd/sandboxctl@VERSION bridge
//
// or build the binary anywhere and give its path (sandbox.WithBridge, the runners'
// WithBridge):
//
//	CGO_ENABLED=0 go build -o sandbox-bridge github.com/agentsandbox/sandbox/cmd/sandbox-bridge
package bridge

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentsandbox/sandbox/internal/gobuild"
)

// Package is the import path of the bridge's main package.
const Package = "github.com/agentsandbox/sandbox/cmd/sandbox-bridge"

// DefaultDir is where Build puts the binary when given no directory: agentsandbox/bridge
// under the user's cache directory (os.UserCacheDir), or under the temporary directory
// when there is none.
func DefaultDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "agentsandbox", "bridge")
}

// Build compiles the bridge (Package) as a static Linux binary for the host's
// architecture (cgo off, -trimpath, stripped) into dir, or DefaultDir when dir is
// empty, and returns its absolute path, ready for the runners' WithBridge options.
//
// The file is named after this module's released version and checksum, or, in a
// development build, after a hash of every source file that goes into it and of the
// Go version: a call finds the binary an earlier process built without building
// again (at a released version without running the go command at all), and changed
// sources give a new file. Within one process, later calls for the same directory
// return at once. Concurrent builds into one directory from several processes are
// safe: each renames a complete file into place.
//
// Building needs the go command on PATH and this module's sources, which any module
// that requires this one has (in the module cache, or through a replace directive).
func Build(ctx context.Context, dir string) (string, error) {
	if dir == "" {
		dir = DefaultDir()
	}
	p, err := gobuild.Cached(ctx, Package, "sandbox-bridge", dir)
	if err != nil {
		return "", fmt.Errorf("bridge: build: %w", err)
	}
	return p, nil
}
