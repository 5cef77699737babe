// Package agentimage packages an agent as a container image with no registry and no
// Dockerfile: a statically linked binary (BuildGo compiles one from a Go main package)
// goes into a FROM scratch image (Static), with host directory trees added as needed
// (Dir), packed with exact modes and owners as an image archive that both runners
// load: docker.Runner.LoadImage and containerd.Runner.LoadImage, or `docker load` and
// `ctr images import`. Image.Open streams the archive (files are read from the host as
// it is written, so memory does not grow with the image); Image.Archive returns it as
// bytes, for small images.
//
// The images are single-layer and deterministic: the same binary gives the same
// reference, so loading an image a runtime already holds changes nothing.
//
// Node builds an image for a Node.js agent from its app directory (package.json and
// lockfile), with the dependency closure installed from npm or taken from a given
// node_modules.
package agentimage

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/agentsandbox/sandbox/internal/gobuild"
	"github.com/agentsandbox/sandbox/port"
)

// Entrypoint is where Static puts the binary, and the image's entrypoint.
const Entrypoint = "/agent"

// ImageLabel is set on every image this package builds (value "agentimage").
const ImageLabel = "dev.agentsandbox.image"

// TestImageLabel marks an image a test suite built (Image.Labels): sandboxtest's probe
// and the project's own test images carry it, and the project's test script removes
// only images that do, never the images its users built with this package.
const TestImageLabel = "dev.agentsandbox.test-image"

// BuildGo compiles the Go main package pkg (an import path, or a relative path such as
// "./agent") as a static Linux binary for the host's architecture and returns its
// bytes. It runs the go command in the working directory, so pkg resolves in the
// working directory's module as `go build` would; the go command must be on PATH.
// The build is reproducible: cgo off, -trimpath, no build ID.
func BuildGo(ctx context.Context, pkg string) ([]byte, error) {
	bin, err := gobuild.StaticBytes(ctx, "", pkg)
	if err != nil {
		return nil, fmt.Errorf("agentimage: building %s: %w", pkg, err)
	}
	return bin, nil
}

// Static returns a minimal image around a static binary: the binary at Entrypoint
// (the image's entrypoint), the sandbox user (port.DefaultUser, 1001:1001) in
// /etc/passwd and /etc/group, a sticky world-writable /tmp, and the directories the
// runners mount over (/workspace, /llm-sock, /run, /proc, /sys, /dev). Append to
// Files for more content.
func Static(name string, bin []byte) Image {
	dir := func(p string, mode fs.FileMode) File { return File{Path: p, Mode: mode, Dir: true} }
	return Image{
		Name:       name,
		Entrypoint: []string{Entrypoint},
		Env:        []string{"PATH=/"},
		Files: []File{
			{Path: Entrypoint, Mode: 0o755, Data: bin},
			dir("/etc", 0o755),
			{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/:" + Entrypoint + "\nsandbox:x:1001:1001:sandbox:" + port.WorkspacePath + ":" + Entrypoint + "\n")},
			{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nsandbox:x:1001:\n")},
			dir("/tmp", 0o777|fs.ModeSticky), dir("/run", 0o755), dir(port.WorkspacePath, 0o755), dir(port.LLMSocketDir, 0o755),
			dir("/proc", 0o755), dir("/sys", 0o755), dir("/dev", 0o755),
		},
	}
}
