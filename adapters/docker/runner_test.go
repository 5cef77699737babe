package docker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestRunnerConformance(t *testing.T) {
	cli, image := dockerEnv(t)
	// With the bridge, as a host should run it: it makes OOM kills exact on Docker.
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("porttest")), WithBridge(testenv.Bridge(t)))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: r, Image: image, Leftovers: drained(r, leftovers(cli))})
}

// panicHandler panics on the first record with the given message, standing in for any
// panic that unwinds through RunOnce after the container exists.
type panicHandler struct {
	slog.Handler
	msg string
}

func (h panicHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h panicHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		panic("injected panic at " + h.msg)
	}
	return nil
}
func (h panicHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

func TestRunnerRemovesContainerOnPanic(t *testing.T) {
	cli, image := dockerEnv(t)
	r, err := NewRunner(WithClient(cli), WithLogger(slog.New(panicHandler{msg: "container started"})))
	if err != nil {
		t.Fatal(err)
	}
	runID := sandboxtest.RunID("panic")
	func() {
		defer func() {
			if v := recover(); v == nil {
				t.Fatal("expected the injected panic")
			}
		}()
		_, _ = r.RunOnce(context.Background(), port.RunSpec{RunID: runID, Image: image, Argv: []string{"/agent", "sleep", "60"}})
	}()
	left, err := drained(r, leftovers(cli))(context.Background(), runID)
	if err != nil || len(left) != 0 {
		t.Fatalf("after a panic: leftovers %v, %v", left, err)
	}
}

func TestSweepRemovesOnlyOwnOldResources(t *testing.T) {
	cli, image := dockerEnv(t)
	ctx := context.Background()
	runID := sandboxtest.RunID("sweep")
	mk := func(owner string, age time.Duration) string {
		lbls := runner.ResourceLabels(owner, runID, port.KindSandbox, nil, time.Now().Add(-age))
		c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config:     &container.Config{Image: image, Entrypoint: []string{"/agent", "sleep", "60"}, Labels: lbls},
			HostConfig: &container.HostConfig{NetworkMode: "none"},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
		})
		return c.ID
	}
	oldOurs := mk(testenv.Owner("sweeper"), time.Hour)
	newOurs := mk(testenv.Owner("sweeper"), 0)
	oldTheirs := mk("someone-else", time.Hour)

	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("sweeper")))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Sweep(ctx, port.SweepOptions{OlderThan: 10 * time.Minute, RunID: runID, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 1 || rep.Removed[0] != "container:"+oldOurs {
		t.Fatalf("dry run would remove %v, want only %s", rep.Removed, oldOurs)
	}
	exists := func(id string) bool {
		_, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		return err == nil
	}
	if !exists(oldOurs) {
		t.Fatal("dry run removed a container")
	}
	if _, err := r.Sweep(ctx, port.SweepOptions{OlderThan: 10 * time.Minute, RunID: runID}); err != nil {
		t.Fatal(err)
	}
	if exists(oldOurs) || !exists(newOurs) || !exists(oldTheirs) {
		t.Errorf("after sweep: old ours exists=%v (want false), new ours=%v (want true), theirs=%v (want true)",
			exists(oldOurs), exists(newOurs), exists(oldTheirs))
	}
	if _, err := r.Sweep(ctx, port.SweepOptions{RunID: "../bad"}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("sweep with bad run id: %v", err)
	}
}

func TestUnreachableDaemonIsUnavailable(t *testing.T) {
	r, err := NewRunner(WithHost("unix:///nonexistent/docker.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Ping(ctx); !errors.Is(err, port.ErrUnavailable) {
		t.Errorf("Ping: %v, want ErrUnavailable", err)
	}
	_, err = r.RunOnce(ctx, port.RunSpec{RunID: "r1", Image: "x", Argv: []string{"true"}})
	if !errors.Is(err, port.ErrUnavailable) || !strings.Contains(err.Error(), "Runner.Ping") {
		t.Errorf("RunOnce: %v, want ErrUnavailable with a hint naming Ping", err)
	}
	var op *port.OpError
	if !errors.As(err, &op) || op.RunID != "r1" {
		t.Errorf("error %v is not an OpError for r1", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, o := range map[string]Option{
		"empty host": WithHost(""), "bad owner": WithOwner("a/b"), "nil logger": WithLogger(nil),
		"relative bridge": WithBridge("bridge"), "missing bridge": WithBridge("/nonexistent/bridge"),
		"zero cleanup": WithCleanupTimeout(0), "nil client": WithClient(nil),
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
			return NewRunner(WithOwner(testenv.Owner("pool-host")), WithBridge(bridge), WithPoolDir(d))
		}
		opts := []Option{WithOwner(testenv.Owner("crash"))}
		if bridge != "" {
			opts = append(opts, WithBridge(bridge))
		}
		return NewRunner(opts...)
	})
	sweepDeadOwners()
	os.Exit(m.Run())
}

func TestSweepAfterCrash(t *testing.T) {
	cli, image := dockerEnv(t)
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("crash")))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestSweepAfterCrash(t, sandboxtest.CrashHarness{Sweeper: r, Leftovers: drained(r, leftovers(cli)), Image: image})
}

func TestDeadlineWithoutHost(t *testing.T) {
	cli, image := dockerEnv(t)
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("crash")))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestDeadlineWithoutHost(t, sandboxtest.CrashHarness{
		Sweeper: r, Leftovers: drained(r, leftovers(cli)), Image: image, Bridge: testenv.Bridge(t),
		Running: func(ctx context.Context, runID string) (bool, error) {
			list, err := cli.ContainerList(ctx, client.ContainerListOptions{
				Filters: make(client.Filters).Add("label", port.LabelRunID+"="+runID).Add("status", "running"),
			})
			return len(list.Items) > 0, err
		},
	})
}
