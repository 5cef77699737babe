// Package bridge provides the in-sandbox LLM bridge, the binary the runners start as a
// sandbox's entrypoint (docker.WithBridge, containerd.WithBridge): it listens on
// port.BridgeAddr inside the sandbox, forwards to the run's proxy socket, and runs the
// agent as its child. Without it an agent has no way to reach its LLM proxy.
//
// Build compiles it from this module's sources with the local Go toolchain and caches
// the result by content, so a host needs nothing prepared by hand. For hosts without a
// Go toolchain, build the binary where there is one, ship it, and pass its path to the
// runners:
//
//	CGO_ENABLED=0 go install github.com/agentsandbox/sandbox/cmd/sandbox-bridge@latest
package bridge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/agentsandbox/sandbox/internal/gobuild"
)

// Package is the import path of the bridge's main package.
const Package = "github.com/agentsandbox/sandbox/cmd/sandbox-bridge"

var buildMu sync.Mutex
var built = map[string]string{} // dir -> binary, for repeated calls in one process

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
// The file is named after a hash of every source file that goes into it (this module's
// and its dependencies') and of the Go version, so a call finds the binary an earlier
// process built without building again, and changed sources give a new file. Within
// one process, later calls for the same directory return at once. Concurrent builds
// into one directory from several processes are safe: each renames a complete file
// into place.
//
// Build needs the go command on PATH and this module's sources, which any module that
// requires this one has (in the module cache, or through a replace directive).
func Build(ctx context.Context, dir string) (string, error) {
	if dir == "" {
		dir = DefaultDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("bridge: build: %w", err)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[abs]; ok {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("bridge: build: %w", err)
	}
	src := gobuild.ModuleDir()
	ver, err := gobuild.Go(ctx, src, "env", "GOVERSION")
	if err != nil {
		return "", fmt.Errorf("bridge: %w", err)
	}
	list, err := gobuild.Go(ctx, src, "list", "-deps", "-f", `{{if not .Standard}}{{.Dir}}{{range .GoFiles}}|{{.}}{{end}}{{range .EmbedFiles}}|{{.}}{{end}}{{end}}`, Package)
	if err != nil {
		return "", fmt.Errorf("bridge: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", bytes.TrimSpace(ver), runtime.GOARCH)
	for line := range strings.Lines(string(list)) {
		parts := strings.Split(strings.TrimSpace(line), "|")
		if len(parts) < 2 {
			continue
		}
		for _, name := range parts[1:] {
			if err := hashFile(h, filepath.Join(parts[0], name)); err != nil {
				return "", fmt.Errorf("bridge: build: %w", err)
			}
		}
	}
	out := filepath.Join(abs, "sandbox-bridge-"+hex.EncodeToString(h.Sum(nil))[:16])
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		built[abs] = out
		return out, nil
	}

	tmp, err := os.CreateTemp(abs, ".sandbox-bridge-*")
	if err != nil {
		return "", fmt.Errorf("bridge: build: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := gobuild.Static(ctx, src, Package, tmp.Name()); err != nil {
		return "", fmt.Errorf("bridge: %w", err)
	}
	// The sandbox user (not the builder) executes it from a read-only mount.
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return "", fmt.Errorf("bridge: build: %w", err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("bridge: build: %w", err)
	}
	built[abs] = out
	return out, nil
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(h, "%s\n", filepath.Base(path))
	_, err = io.Copy(h, f)
	return err
}
