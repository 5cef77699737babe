package sandboxtest

import (
	"context"
	"fmt"
	"io/fs"
	"sync"

	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/internal/gobuild"
)

// ProbeImageName is the repository of the probe agent image.
const ProbeImageName = "agentsandbox/testagent"

// ProbePackage is the Go main package of the probe agent that the suites run.
const ProbePackage = "github.com/agentsandbox/sandbox/sandboxtest/probe"

var probe struct {
	sync.Mutex
	ref     string
	archive []byte
	bin     []byte
}

// ProbeImage builds the probe agent image the suites need and returns its reference
// and its image archive, which the adapter under test loads before calling a suite
// (both runners' LoadImage take it). The image is agentimage.Static around the probe
// plus /agent-suid, the same binary setuid root, to prove no-new-privileges, and
// ProbeWritableDir.
//
// It compiles ProbePackage with the go command, from this module's sources when they
// are on disk (so it works in another module that requires this one), once per
// process. The reference is derived from the content.
// ProbeWritableDir is a directory of the probe image's root filesystem that file
// permissions let anyone write to: only the read-only mount of the root stops a write
// there, so the suite sees that mount and not a permission check. (A runtime may check
// permissions first: gVisor answers a write to "/" by a non-root user with EACCES.)
const ProbeWritableDir = "/world-writable"

func ProbeImage(ctx context.Context) (ref string, archive []byte, err error) {
	probe.Lock()
	defer probe.Unlock()
	if probe.ref != "" {
		return probe.ref, probe.archive, nil
	}
	img, err := probeImage(ctx)
	if err != nil {
		return "", nil, err
	}
	ref, archive, err = img.Archive()
	if err != nil {
		return "", nil, err
	}
	probe.ref, probe.archive = ref, archive
	return ref, archive, nil
}

// ProbeAgentImage is the probe agent image ProbeImage packs, for a test that pushes it
// (Image.Push) rather than loading it.
func ProbeAgentImage(ctx context.Context) (agentimage.Image, error) {
	probe.Lock()
	defer probe.Unlock()
	return probeImage(ctx)
}

// probeImage builds the probe image, its binary once per process (probe.bin).
func probeImage(ctx context.Context) (agentimage.Image, error) {
	if probe.bin == nil {
		bin, err := gobuild.StaticBytes(ctx, gobuild.ModuleDir(), ProbePackage)
		if err != nil {
			return agentimage.Image{}, fmt.Errorf("sandboxtest: building the probe: %w", err)
		}
		probe.bin = bin
	}
	img := agentimage.Static(ProbeImageName, probe.bin)
	img.Labels = map[string]string{agentimage.TestImageLabel: "sandboxtest"}
	img.Files = append(img.Files, agentimage.File{Path: "/agent-suid", Mode: 0o755 | fs.ModeSetuid, Data: probe.bin},
		agentimage.File{Path: ProbeWritableDir, Mode: 0o777, Dir: true})
	return img, nil
}
