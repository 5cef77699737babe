package docker

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

// TestOOMUnderCPULoad runs the memory hog with every CPU busy and requires each run to
// be reported as an OOM kill, exactly: Docker's own OOM flag comes from an event that
// can arrive after the exit or not at all, so the bridge's count decides.
// SANDBOX_OOM_RUNS sets the number of runs (default 3; the acceptance run uses 50).
func TestOOMUnderCPULoad(t *testing.T) {
	cli, image := dockerEnv(t)
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("oomtest")), WithBridge(testenv.Bridge(t)))
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

// TestLLMWithoutBridgeRefused: a run with LLM access on a runner without a bridge is
// bad input (the agent would find nothing on 127.0.0.1:8080), unless the image brings
// its own bridge.
func TestLLMWithoutBridgeRefused(t *testing.T) {
	r, err := NewRunner(WithOwner(testenv.Owner("nobridge")))
	if err != nil {
		t.Fatal(err)
	}
	spec := port.RunSpec{RunID: "no-bridge", Image: "agentsandbox/none:1", Argv: []string{"/agent"},
		LLM: &port.LLMSocket{HostDir: t.TempDir()}}
	if _, err := r.RunOnce(context.Background(), spec); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "OwnBridge") {
		t.Errorf("RunOnce = %v, want ErrInvalidSpec naming OwnBridge", err)
	}
	spec.OwnBridge = true
	if err := spec.WithDefaults().CheckBridge(false); err != nil {
		t.Errorf("with OwnBridge: %v", err)
	}
}
