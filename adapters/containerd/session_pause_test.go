package containerd

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/runner/session"
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
				return session.AgeHeartbeat(filepath.Dir(filepath.Dir(p)), time.Now().Add(-d))
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

// BenchmarkSessionPause: a session's Pause and Resume against the task's own Pause
// and Resume through the client, in one loop (sandboxtest.BenchmarkPause).
func BenchmarkSessionPause(b *testing.B) {
	r, image := runnerEnv(b, WithOwner(testenv.Owner("bench")), WithBridge(testenv.Bridge(b)), WithSessionDir(b.TempDir()))
	sandboxtest.BenchmarkPause(b, r, image, func(s port.Session) (func(context.Context) error, func(context.Context) error) {
		cs := s.(*ctrSession)
		cs.mu.Lock()
		task := cs.task
		cs.mu.Unlock()
		return func(ctx context.Context) error { return task.Pause(r.ns(ctx)) },
			func(ctx context.Context) error { return task.Resume(r.ns(ctx)) }
	})
}
