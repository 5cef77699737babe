package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/port"
)

// withDefaults fills what a Request of an Open-made Sandbox left out: a generated
// RunID, a fresh workspace (removed by the returned func once the run is over). A
// Sandbox made by New fills nothing: its host names every part. done is never nil.
func (s *Sandbox) withDefaults(req Request) (_ Request, done func(), err error) {
	done = func() {}
	if s.open == nil {
		return req, done, nil
	}
	if req.RunID == "" {
		req.RunID = NewRunID()
	}
	if s.open.key != nil && req.User != "" {
		// The default proxies accept connections from the default sandbox user only.
		if uid, _, err := parseUser(req.User); err != nil {
			return req, done, err
		} else if uid != defaultUID {
			return req, done, fmt.Errorf("sandbox: run %s: %w", req.RunID, port.Invalidf("User %q: Open's proxies accept connections from uid %d only (inprocproxy.WithSandboxUID); give a proxy manager of your own with WithLLM for another user", req.User, defaultUID))
		}
	}
	if req.WorkspaceDir == "" && req.Grant.AllowSandbox && port.ValidateRunID(req.RunID) == nil {
		ws, err := NewWorkspace("", req.User, WithWorkspaceOwner(s.open.owner), WithWorkspaceRunID(req.RunID))
		if err != nil {
			return req, done, fmt.Errorf("sandbox: run %s: %w", req.RunID, err)
		}
		req.WorkspaceDir = ws.Dir()
		done = func() {
			if err := ws.Remove(); err != nil {
				s.logger.Warn("removing the run's workspace failed; SweepWorkspaces removes it", logattr.RunID, req.RunID, logattr.Err, err)
			}
		}
	}
	return req, done, nil
}

// proxyKey is the key a run's proxy gets: the configured one, or, on an Open-made
// Sandbox, its minted key renewed when it would expire before a run of lifetime
// could end.
func (s *Sandbox) proxyKey(ctx context.Context, lifetime time.Duration) (string, error) {
	if s.open == nil || s.open.key == nil {
		return s.llm.APIKey, nil
	}
	return s.open.key.forRun(ctx, lifetime+proxyDeadlineGrace+5*time.Minute)
}
