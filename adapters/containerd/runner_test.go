package containerd

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestRunnerConformance(t *testing.T) {
	r, image := runnerEnv(t, WithOwner("porttest"))
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
	} {
		if _, err := NewRunner(o); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec", name, err)
		}
	}
}

func TestMain(m *testing.M) {
	sandboxtest.CrashChildMain(func() (port.SandboxRunner, error) {
		return NewRunner(WithNamespace(testNamespace), WithOwner("crash"))
	})
	os.Exit(m.Run())
}

func TestSweepAfterCrash(t *testing.T) {
	r, image := runnerEnv(t, WithOwner("crash"))
	sandboxtest.TestSweepAfterCrash(t, sandboxtest.CrashHarness{Sweeper: r, Leftovers: leftovers(r), Image: image})
}
