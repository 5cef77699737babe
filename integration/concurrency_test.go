package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkConcurrentSandboxes finds how many real sandboxes, each with its own
// in-process proxy, are held alive at the same moment on this machine before anything
// fails. At each level every sandbox makes an LLM call through its proxy and then waits
// at a barrier; only when all of them have made their call (all alive at once) is the
// barrier released. Levels double from 8 until one fails or 256 pass.
func BenchmarkConcurrentSandboxes(b *testing.B) {
	for _, rt := range []struct {
		name string
		new  func(testing.TB, string) (port.SandboxRunner, string)
	}{{"docker", dockerRunner}, {"containerd", containerdRunner}} {
		b.Run(rt.name, func(b *testing.B) {
			ctx := context.Background()
			bin := testenv.Bridge(b)
			runner, image := rt.new(b, bin)
			fake := litellmtest.NewServer()
			defer fake.Close()
			base, _ := os.MkdirTemp("", "conc")
			defer os.RemoveAll(base)
			pm, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(testenv.Owner("conc")), inprocproxy.WithSandboxUID(1001))
			if err != nil {
				b.Fatal(err)
			}
			defer pm.Shutdown(ctx)
			barrierDir, _ := os.MkdirTemp("", "barrier")
			defer os.RemoveAll(barrierDir)
			_ = os.Chmod(barrierDir, 0o755) // the sandbox user must see the barrier
			var passed int
			var broke string
			for b.Loop() {
				passed, broke = 0, "nothing up to 256"
				for n := 8; n <= 256; n *= 2 {
					start := time.Now()
					if errs := concurrentRuns(ctx, runner, pm, image, fake, n, barrierDir); len(errs) > 0 {
						broke = fmt.Sprintf("at %d: %d failed, first: %v", n, len(errs), errs[0])
						break
					}
					b.Logf("%d sandboxes at once: ok in %v", n, time.Since(start).Round(time.Millisecond))
					passed = n
				}
			}
			b.ReportMetric(float64(passed), "max-concurrent-ok")
			b.ReportMetric(0, "ns/op")
			b.Logf("largest level with no failure: %d; next: %s", passed, broke)
		})
	}
}

func concurrentRuns(ctx context.Context, runner port.SandboxRunner, pm *inprocproxy.Manager, image string, fake *litellmtest.Server, n int, barrierDir string) []error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	barrier := fmt.Sprintf("%s/go-%d", barrierDir, n)
	fake.ResetRequests()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := oneRun(ctx, runner, pm, image, fake, i, barrierDir, barrier)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(i)
	}
	// Release the barrier once all n calls arrived (all n sandboxes alive), or after
	// a bound, in which case the level failed.
	deadline := time.Now().Add(4 * time.Minute)
	for fake.RequestCount("/v1/chat/completions") < n && time.Now().Before(deadline) {
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := fake.RequestCount("/v1/chat/completions")
	_ = os.WriteFile(barrier, nil, 0o644)
	wg.Wait()
	if got < n && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("only %d of %d sandboxes were alive at once", got, n))
	}
	return errs
}

func oneRun(ctx context.Context, runner port.SandboxRunner, pm *inprocproxy.Manager, image string, fake *litellmtest.Server, i int, barrierDir, barrier string) error {
	runID := sandboxtest.RunID("conc")
	p, err := pm.Start(ctx, port.ProxySpec{RunID: runID, Upstream: fake.URL, APIKey: fake.MasterKey(), Attribution: port.Attribution{BillingAccountID: "acct"}})
	if err != nil {
		return err
	}
	defer p.Stop(context.Background())
	sock := p.Socket()
	marker := fmt.Sprintf("MARKER:c%d", i)
	res, err := runner.RunOnce(ctx, port.RunSpec{
		RunID: runID, Image: image, Argv: []string{"/agent", "hold", "/barrier/" + filepath.Base(barrier), "gpt-4o-mini", marker},
		LLM: &sock, Limits: port.Limits{Timeout: 6 * time.Minute, MemoryBytes: 64 << 20, PIDs: 64},
		Mounts: []port.Mount{{Source: barrierDir, Target: "/barrier"}},
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), fmt.Sprintf("ECHO:c%d", i)) {
		return fmt.Errorf("run %d: exit %d: %s %s", i, res.ExitCode, res.Stdout, res.Stderr)
	}
	return nil
}
