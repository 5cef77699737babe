package docker

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/sessionkit"
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
	return sessionkit.AgeHeartbeat(filepath.Dir(filepath.Dir(p)), time.Now().Add(-d))
}
