package kubetest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/internal/gobuild"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// PausePackage is the pause program's package.
const PausePackage = "github.com/agentsandbox/sandbox/internal/testsupport/kubetest/pause"

// PauseImage builds the pod sandbox image: a static pause program in a scratch image.
func PauseImage(ctx context.Context) (ref string, archive []byte, err error) {
	bin, err := gobuild.StaticBytes(ctx, gobuild.ModuleDir(), PausePackage)
	if err != nil {
		return "", nil, fmt.Errorf("kubetest: building pause: %w", err)
	}
	img := agentimage.Static("agentsandbox/pause", bin)
	return img.Archive()
}

var shared = testenv.SharedPart[*Cluster]{Part: "kubernetes", Name: "kubetest"}

// Main starts one cluster for a test package, runs the tests and tears the cluster
// down. Without the binaries (BinDir) the tests still run: Shared then skips them, or
// fails them under SANDBOX_REQUIRE.
func Main(m *testing.M) int {
	if _, err := BinDir(); err != nil {
		shared.Fail(err)
		return m.Run()
	}
	return shared.Main(m, func() (*Cluster, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		c, err := Start(ctx, Options{Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
		if err == nil {
			fmt.Fprintf(os.Stderr, "kubetest: cluster ready in %v (runtime classes %v)\n", c.Started.Round(10*time.Millisecond), c.RuntimeClasses)
		}
		return c, err
	}, (*Cluster).Leftovers)
}

// Shared returns the cluster Main started. It skips t when there is none (or fails it
// under SANDBOX_REQUIRE=kubernetes or all).
func Shared(t testing.TB) *Cluster {
	t.Helper()
	return shared.Get(t)
}
