package kubetest

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
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

var shared struct {
	sync.Mutex
	c   *Cluster
	err error
}

// Main starts one cluster for a test package, runs the tests and tears the cluster
// down. Without the binaries (BinDir) the tests still run: Shared then skips them, or
// fails them under SANDBOX_REQUIRE.
func Main(m *testing.M) int {
	if _, err := BinDir(); err != nil {
		shared.err = err
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	c, err := Start(ctx, Options{Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
	cancel()
	if err != nil {
		shared.err = err
		fmt.Fprintf(os.Stderr, "kubetest: %v\n", err)
		return m.Run()
	}
	fmt.Fprintf(os.Stderr, "kubetest: cluster ready in %v (runtime classes %v)\n", c.Started.Round(10*time.Millisecond), c.RuntimeClasses)
	shared.c = c
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if _, ok := <-sig; ok {
			_ = c.Close()
			os.Exit(2)
		}
	}()
	code := m.Run()
	signal.Stop(sig)
	close(sig)
	t := time.Now()
	if err := c.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "kubetest: tearing the cluster down: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	fmt.Fprintf(os.Stderr, "kubetest: torn down in %v\n", time.Since(t).Round(10*time.Millisecond))
	if left := c.Leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "kubetest: the teardown left %v\n", left)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Shared returns the cluster Main started. It skips t when there is none (or fails it
// under SANDBOX_REQUIRE=kubernetes or all).
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	reason := "no cluster (kubetest.Main was not called from TestMain)"
	if shared.err != nil {
		reason = shared.err.Error()
	}
	testenv.Need(t, "kubernetes", shared.c != nil, reason)
	return shared.c
}
