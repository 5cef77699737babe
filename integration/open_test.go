package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// TestOpenMissingImage: through sandbox.Open, on both runtimes, a run of an image
// the engine does not hold is port.ErrImageNotFound (and ErrNotFound), never
// ErrContainerFailed, with no result (nothing was created), and its message says
// to load it (LoadImage) or change the pull policy.
func TestOpenMissingImage(t *testing.T) {
	for _, rt := range []struct {
		name string
		need func(*testing.T)
	}{{"docker", needDocker}, {"containerd", needContainerd}} {
		t.Run(rt.name, func(t *testing.T) {
			rt.need(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			sb, err := sandbox.Open(ctx, rt.name+"://", sandbox.WithoutLLM(), sandbox.WithOwner(testenv.Owner("open-noimage")), sandbox.WithBridge(testenv.Bridge(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close()
			res, err := sb.Run(ctx, sandbox.Request{Grant: sandbox.Grant{AllowSandbox: true}, Image: "agentsandbox/not-loaded:nope"})
			if !errors.Is(err, port.ErrImageNotFound) || !errors.Is(err, port.ErrNotFound) || errors.Is(err, port.ErrContainerFailed) || res != nil {
				t.Fatalf("res %+v, err %v: want ErrImageNotFound, no result", res, err)
			}
			for _, want := range []string{`"agentsandbox/not-loaded:nope"`, "LoadImage", "pull policy is Never", "PullIfNotPresent", "; hint: load the image"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error lacks %q: %v", want, err)
				}
			}
		})
	}
}

// TestOpenDetectsThisHost: the empty target picks the runtime this host has (here
// Docker, the first the drivers try), as sandboxctl doctor reports it.
func TestOpenDetectsThisHost(t *testing.T) {
	needDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := port.DetectRuntime(ctx, "docker://")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.Open(ctx, "", sandbox.WithoutLLM(), sandbox.WithOwner(testenv.Owner("open-detect")), sandbox.WithBridge(testenv.Bridge(t)))
	if err != nil {
		t.Fatalf("Open(\"\"): %v (docker answers: %s)", err, info.Detail)
	}
	defer sb.Close()
	if _, err := sb.Run(ctx, sandbox.Request{Grant: sandbox.Grant{AllowSandbox: true}, Image: "agentsandbox/not-loaded:nope"}); !strings.Contains(err.Error(), "is not in Docker") {
		t.Errorf("the empty target did not pick Docker: %v", err)
	}
}
