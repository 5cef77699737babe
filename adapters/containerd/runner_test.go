package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestRunnerConformance(t *testing.T) {
	// With the bridge as every sandbox's init, as a host runs it.
	r, image := runnerEnv(t, WithOwner(testenv.Owner("porttest")), WithBridge(testenv.Bridge(t)))
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: r, Image: image, Leftovers: leftovers(r)})
}

func TestInternalNetworkUnsupported(t *testing.T) {
	r, err := NewRunner()
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.RunOnce(context.Background(), port.RunSpec{RunID: "r1", Image: "x", Argv: []string{"x"}, Network: port.NetworkMode{Internal: "n"}})
	if !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("err = %v, want ErrUnsupported", err)
	}
}

func TestUnreachableDaemonIsUnavailable(t *testing.T) {
	r, err := NewRunner(WithAddress("/nonexistent/containerd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := r.Ping(ctx); !errors.Is(err, port.ErrUnavailable) {
		t.Errorf("Ping: %v, want ErrUnavailable", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, o := range map[string]Option{
		"relative address": WithAddress("containerd.sock"), "bad namespace": WithNamespace("a/b"),
		"bad owner": WithOwner(""), "nil logger": WithLogger(nil), "empty snapshotter": WithSnapshotter(""),
		"missing bridge": WithBridge("/nonexistent/bridge"), "zero cleanup": WithCleanupTimeout(0),
		"zero kill grace": WithKillGrace(0),
	} {
		if _, err := NewRunner(o); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec", name, err)
		}
	}
}

func TestMain(m *testing.M) {
	sandboxtest.CrashChildMain(func(bridge string) (port.SandboxRunner, error) {
		if os.Getenv(poolCrashEnv) != "" {
			return crashPool(bridge)
		}
		if d := os.Getenv(poolHostDirEnv); d != "" {
			return NewRunner(WithNamespace(testNamespace), WithOwner(testenv.Owner("pool-host")), WithBridge(bridge), WithPoolDir(d))
		}
		opts := []Option{WithNamespace(testNamespace), WithOwner(testenv.Owner("crash"))}
		if bridge != "" {
			opts = append(opts, WithBridge(bridge))
		}
		return NewRunner(opts...)
	})
	sweepDeadOwners()
	os.Exit(m.Run())
}

func TestSweepAfterCrash(t *testing.T) {
	r, image := runnerEnv(t, WithOwner(testenv.Owner("crash")))
	sandboxtest.TestSweepAfterCrash(t, sandboxtest.CrashHarness{Sweeper: r, Leftovers: leftovers(r), Image: image})
}

func TestDeadlineWithoutHost(t *testing.T) {
	r, image := runnerEnv(t, WithOwner(testenv.Owner("crash")))
	sandboxtest.TestDeadlineWithoutHost(t, sandboxtest.CrashHarness{
		Sweeper: r, Leftovers: leftovers(r), Image: image, Bridge: testenv.Bridge(t),
		Running: func(ctx context.Context, runID string) (bool, error) {
			ctx = r.ns(ctx)
			cs, err := r.cli.Containers(ctx, fmt.Sprintf(`labels.%q==%q`, port.LabelRunID, runID))
			if err != nil {
				return false, err
			}
			for _, c := range cs {
				task, err := c.Task(ctx, nil)
				if errdefs.IsNotFound(err) {
					continue
				} else if err != nil {
					return false, err
				}
				st, err := task.Status(ctx)
				if err != nil {
					return false, err
				}
				if st.Status == client.Running {
					return true, nil
				}
			}
			return false, nil
		},
	})
}

// TestWrongAddressFailsFast: a wrong address is a daemon-level error naming the
// address, at once, not a per-image timeout after gRPC retried for the whole deadline.
func TestWrongAddressFailsFast(t *testing.T) {
	const bad = "/nonexistent/containerd.sock"
	t.Setenv("CONTAINERD_ADDRESS", "unix://"+bad) // honoured like DOCKER_HOST
	r, err := NewRunner()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = r.RunOnce(ctx, port.RunSpec{RunID: "wrong-address", Image: "agentsandbox/none:1", Argv: []string{"/agent"}})
	if !errors.Is(err, port.ErrUnavailable) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "Runner.Ping") {
		t.Errorf("RunOnce = %v, want ErrUnavailable naming %s", err, bad)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("RunOnce took %v to fail, want at once", d)
	}
}
