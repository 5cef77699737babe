package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// TestOOMUnderCPULoad runs the memory hog with every CPU busy and requires each run to
// be reported as an OOM kill, exactly: Docker's own OOM flag comes from an event that
// can arrive after the exit or not at all, so the bridge's count decides.
// SANDBOX_OOM_RUNS sets the number of runs (default 3; the acceptance run uses 50).
func TestOOMUnderCPULoad(t *testing.T) {
	cli, image := dockerEnv(t)
	r, err := NewRunner(WithClient(cli), WithOwner("oomtest"), WithBridge(testenv.Bridge(t)))
	if err != nil {
		t.Fatal(err)
	}
	n := testenv.Count("SANDBOX_OOM_RUNS", 3)
	testenv.BusyCPUs(t)
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		spec := port.RunSpec{
			RunID:  fmt.Sprintf("oom-load-%d-%d", time.Now().UnixNano()%1e6, i),
			Image:  image,
			Argv:   []string{"/agent", "memhog"},
			Limits: port.Limits{Timeout: 90 * time.Second, MemoryBytes: 48 << 20},
		}
		res, err := r.RunOnce(ctx, spec)
		cancel()
		if res != nil && strings.Contains(string(res.Stderr), "sandbox-bridge:") {
			t.Errorf("run %d: the bridge's notice reached the result: %q", i, res.Stderr)
		}
		if !errors.Is(err, port.ErrOOMKilled) || res == nil || res.ErrorCode != port.CodeOOMKilled || res.ExitCode != 137 {
			var exit int
			var code port.ErrorCode
			if res != nil {
				exit, code = res.ExitCode, res.ErrorCode
			}
			t.Fatalf("run %d: exit=%d code=%q err=%v, want an OOM kill", i, exit, code, err)
		}
	}
}
