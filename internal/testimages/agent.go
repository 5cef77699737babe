package testimages

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/moby/moby/client"
)

// AgentImageName is the repository of the probe agent image.
const AgentImageName = "agentsandbox/testagent"

// AgentPackage is the Go package of the probe agent.
const AgentPackage = "github.com/agentsandbox/sandbox/internal/testimages/agent"

// BuildStatic compiles a Go main package as a static linux/amd64 binary (CGO off,
// trimmed paths, so the output is reproducible) and returns its bytes.
func BuildStatic(ctx context.Context, pkg string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "agentsandbox-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("testimages: go build %s: %v: %s", pkg, err, stderr.String())
	}
	return os.ReadFile(out)
}

// StaticImage is a minimal image for a static binary: /agent (the entrypoint), the
// sandbox user 1001 in /etc/passwd, and empty mount points.
func StaticImage(name string, bin []byte) Image {
	dir := func(p string, mode fs.FileMode) File { return File{Path: p, Mode: mode, Dir: true} }
	return Image{
		Name:       name,
		Entrypoint: []string{"/agent"},
		Env:        []string{"PATH=/"},
		Files: []File{
			{Path: "/agent", Mode: 0o755, Data: bin},
			dir("/etc", 0o755),
			{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/:/agent\nsandbox:x:1001:1001:sandbox:/workspace:/agent\n")},
			{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nsandbox:x:1001:\n")},
			dir("/tmp", 0o777|fs.ModeSticky), dir("/run", 0o755), dir("/workspace", 0o755), dir("/llm-sock", 0o755),
			dir("/proc", 0o755), dir("/sys", 0o755), dir("/dev", 0o755),
		},
	}
}

// AgentImage returns the probe agent image: StaticImage plus /agent-suid (the same
// binary, setuid root, to prove no-new-privileges).
func AgentImage(agent []byte) Image {
	img := StaticImage(AgentImageName, agent)
	img.Files = append(img.Files, File{Path: "/agent-suid", Mode: 0o755 | fs.ModeSetuid, Data: agent})
	return img
}

var agentOnce struct {
	sync.Mutex
	ref     string
	archive []byte
}

// AgentArchive builds the probe agent and its image archive (once per process).
func AgentArchive(ctx context.Context) (ref string, archive []byte, err error) {
	agentOnce.Lock()
	defer agentOnce.Unlock()
	if agentOnce.ref != "" {
		return agentOnce.ref, agentOnce.archive, nil
	}
	bin, err := BuildStatic(ctx, AgentPackage)
	if err != nil {
		return "", nil, err
	}
	ref, archive, err = Archive(AgentImage(bin))
	if err != nil {
		return "", nil, err
	}
	agentOnce.ref, agentOnce.archive = ref, archive
	return ref, archive, nil
}

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
	out, _ := readAll(rc)
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return fmt.Errorf("testimages: %s not present after load: %v: %s", ref, err, out)
	}
	return nil
}

func readAll(r interface{ Read([]byte) (int, error) }) (string, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(r)
	return b.String(), err
}
