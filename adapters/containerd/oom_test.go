package containerd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// TestOOMUnderCPULoad proves that an OOM kill is reported as such however late the
// runtime's OOM event arrives: with every CPU busy, and again with the event ignored
// altogether, so the task's cgroup counter alone decides. SANDBOX_OOM_RUNS sets the
// number of runs of each (default 3; the acceptance run uses 50).
func TestOOMUnderCPULoad(t *testing.T) {
	r, image := runnerEnv(t)
	n := testenv.Count("SANDBOX_OOM_RUNS", 3)
	testenv.BusyCPUs(t)
	for _, events := range []bool{true, false} {
		t.Run(fmt.Sprintf("events=%v", events), func(t *testing.T) {
			r.cfg.ignoreOOMEvents = !events
			defer func() { r.cfg.ignoreOOMEvents = false }()
			for i := 0; i < n; i++ {
				assertOOM(t, r, image, i)
			}
		})
	}
}

func assertOOM(t *testing.T, r port.SandboxRunner, image string, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := port.RunSpec{
		RunID:  fmt.Sprintf("oom-load-%d-%d", time.Now().UnixNano()%1e6, i),
		Image:  image,
		Argv:   []string{"/agent", "memhog"},
		Limits: port.Limits{Timeout: 90 * time.Second, MemoryBytes: 48 << 20},
	}
	res, err := r.RunOnce(ctx, spec)
	if !errors.Is(err, port.ErrOOMKilled) || res == nil || res.ErrorCode != port.CodeOOMKilled || res.ExitCode != 137 {
		var exit int
		var code port.ErrorCode
		if res != nil {
			exit, code = res.ExitCode, res.ErrorCode
		}
		t.Fatalf("run %d: exit=%d code=%q err=%v, want an OOM kill", i, exit, code, err)
	}
}

// TestLLMWithoutBridgeRefused: as on Docker, a run with LLM access and no bridge is
// refused before anything is created.
func TestLLMWithoutBridgeRefused(t *testing.T) {
	r, err := NewRunner(WithOwner(testenv.Owner("nobridge")))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	spec := port.RunSpec{RunID: "no-bridge", Image: "agentsandbox/none:1", Argv: []string{"/agent"},
		LLM: &port.LLMSocket{HostDir: t.TempDir()}}
	if _, err := r.RunOnce(context.Background(), spec); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "OwnBridge") {
		t.Errorf("RunOnce = %v, want ErrInvalidSpec naming OwnBridge", err)
	}
}
