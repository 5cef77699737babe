package containerd

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestSessionConformance(t *testing.T) {
	root := t.TempDir()
	owner := testenv.Owner(sandboxtest.RunID("sesstest"))
	opts := func(t *testing.T) []Option {
		return []Option{WithOwner(owner), WithBridge(testenv.Bridge(t)), WithSessionDir(root)}
	}
	r, image := runnerEnv(t, opts(t)...)
	sandboxtest.TestSessions(t, sandboxtest.SessionHarness{
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
	})
}
