package testimages

import (
	"context"
	"fmt"
	"io/fs"
	"sync"

	"github.com/agentsandbox/sandbox/agentimage"
)

// NodeImageName is the repository of the Node.js runtime image.
const NodeImageName = "agentsandbox/node"

// NodeBinary is where NodeImage puts node.
const NodeBinary = "/usr/local/bin/node"

// AppDir is the empty directory NodeImage leaves for a read-only mount of the
// application (OpenClaw's installed package tree in the tests).
const AppDir = "/opt/app"

// NodeImage packs a host node binary and the shared libraries it links into a
// runtime image: node at NodeBinary, the sandbox user 1001, and empty mount points.
// The application is not in the image: it is mounted read-only at AppDir, so an
// 800 MB package tree is never copied into an archive.
func NodeImage(ctx context.Context, nodeBin string) (agentimage.Image, error) {
	files, err := hostBinary(ctx, nodeBin, NodeBinary)
	if err != nil {
		return agentimage.Image{}, err
	}
	files = withDirs(files, "/etc", "/run", "/workspace", "/llm-sock", "/proc", "/sys", "/dev", AppDir)
	files = append(files,
		agentimage.File{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/:/usr/sbin/nologin\nsandbox:x:1001:1001:sandbox:/workspace:/usr/sbin/nologin\n")},
		agentimage.File{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nsandbox:x:1001:\n")},
		agentimage.File{Path: "/tmp", Mode: 0o777 | fs.ModeSticky, Dir: true},
	)
	return agentimage.Image{
		Name:       NodeImageName,
		Entrypoint: []string{NodeBinary},
		Env:        []string{"PATH=/usr/local/bin"},
		User:       "1001:1001",
		Files:      files,
		Labels:     map[string]string{agentimage.TestImageLabel: "testimages"},
	}, nil
}

var nodeOnce struct {
	sync.Mutex
	bin, ref string
	archive  []byte
}

// NodeArchive builds the node image archive for nodeBin (once per process).
func NodeArchive(ctx context.Context, nodeBin string) (ref string, archive []byte, err error) {
	nodeOnce.Lock()
	defer nodeOnce.Unlock()
	if nodeOnce.archive != nil && nodeOnce.bin == nodeBin {
		return nodeOnce.ref, nodeOnce.archive, nil
	}
	img, err := NodeImage(ctx, nodeBin)
	if err != nil {
		return "", nil, fmt.Errorf("testimages: node image: %w", err)
	}
	ref, archive, err = img.Archive()
	if err != nil {
		return "", nil, err
	}
	nodeOnce.bin, nodeOnce.ref, nodeOnce.archive = nodeBin, ref, archive
	return ref, archive, nil
}
