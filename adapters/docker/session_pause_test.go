package docker

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestSessionPauseConformance(t *testing.T) {
	cli, image := dockerEnv(t)
	root := t.TempDir()
	owner := testenv.Owner(sandboxtest.RunID("pausetest"))
	open := func(t *testing.T) *Runner {
		r, err := NewRunner(WithClient(cli), WithOwner(owner), WithBridge(testenv.Bridge(t)), WithSessionDir(root))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := open(t)
	sandboxtest.TestSessionPause(t, sandboxtest.PauseHarness{
		SessionHarness: sandboxtest.SessionHarness{
			Runner:       r,
			Reopen:       func(t *testing.T) port.SessionRunner { return open(t) },
			Image:        image,
			Leftovers:    drained(r, leftovers(cli)),
			AgeHeartbeat: ageHeartbeat,
		},
		PID: func(s port.Session) (int, error) {
			ins, err := cli.ContainerInspect(context.Background(), s.ID(), client.ContainerInspectOptions{})
			if err != nil {
				return 0, err
			}
			return ins.Container.State.Pid, nil
		},
	})
}

// ageHeartbeat moves a session's heartbeat back by d (its directory is the expose
// socket's grandparent).
func ageHeartbeat(s port.Session, d time.Duration) error {
	p, err := s.Expose(7000)
	if err != nil {
		return err
	}
	return session.AgeHeartbeat(filepath.Dir(filepath.Dir(p)), time.Now().Add(-d))
}

// BenchmarkSessionPause: a session's Pause and Resume against Docker's own pause and
// unpause of the same container, in one loop (sandboxtest.BenchmarkPause).
func BenchmarkSessionPause(b *testing.B) {
	cli, image := dockerEnv(b)
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("bench")), WithBridge(testenv.Bridge(b)), WithSessionDir(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	sandboxtest.BenchmarkPause(b, r, image, func(s port.Session) (func(context.Context) error, func(context.Context) error) {
		return func(ctx context.Context) error {
				_, err := cli.ContainerPause(ctx, s.ID(), client.ContainerPauseOptions{})
				return err
			}, func(ctx context.Context) error {
				_, err := cli.ContainerUnpause(ctx, s.ID(), client.ContainerUnpauseOptions{})
				return err
			}
	})
}
