package docker

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
	cli, image := dockerEnv(t)
	root := t.TempDir()
	owner := testenv.Owner(sandboxtest.RunID("sesstest"))
	open := func(t *testing.T) *Runner {
		r, err := NewRunner(WithClient(cli), WithOwner(owner), WithBridge(testenv.Bridge(t)), WithSessionDir(root))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := open(t)
	sandboxtest.TestSessions(t, sandboxtest.SessionHarness{
		Runner:    r,
		Reopen:    func(t *testing.T) port.SessionRunner { return open(t) },
		Image:     image,
		Leftovers: drained(r, leftovers(cli)),
		AgeHeartbeat: func(s port.Session, d time.Duration) error {
			p, err := s.Expose(7000)
			if err != nil {
				return err
			}
			return session.AgeHeartbeat(filepath.Dir(filepath.Dir(p)), time.Now().Add(-d))
		},
	})
}
