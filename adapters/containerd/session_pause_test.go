package containerd

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/sessionkit"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestSessionPauseConformance(t *testing.T) {
	root := t.TempDir()
	owner := testenv.Owner(sandboxtest.RunID("pausetest"))
	opts := func(t *testing.T) []Option {
		return []Option{WithOwner(owner), WithBridge(testenv.Bridge(t)), WithSessionDir(root)}
	}
	r, image := runnerEnv(t, opts(t)...)
	sandboxtest.TestSessionPause(t, sandboxtest.PauseHarness{
		SessionHarness: sandboxtest.SessionHarness{
			Runner: r,
			Reopen: func(t *testing.T) port.SessionRunner {
				r2, _ := runnerEnv(t, opts(t)...)
				return r2
			},
			Image:     image,
			Leftovers: leftovers(r),
			AgeHeartbeat: func(s port.Session, d time.Duration) error {
				p, err := s.Expose(7000)
				if err != nil {
					return err
				}
				return sessionkit.AgeHeartbeat(filepath.Dir(filepath.Dir(p)), time.Now().Add(-d))
			},
		},
		PID: func(s port.Session) (int, error) {
			cs, ok := s.(*ctrSession)
			if !ok {
				return 0, fmt.Errorf("not a containerd session: %T", s)
			}
			cs.mu.Lock()
			defer cs.mu.Unlock()
			if cs.task == nil {
				return 0, fmt.Errorf("no task")
			}
			return int(cs.task.Pid()), nil
		},
	})
}
