package gateway

import (
	"context"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/errdefs"
)

// WaitStatus is the answer of agent.wait.
type WaitStatus struct {
	// Status is "ok", "error", "timeout" or, while the run goes on, "pending"
	// (or whatever newer gateways report).
	Status string `json:"status"`
	// Error is the gateway's error text for failed runs.
	Error string `json:"error"`
	// StartedAt and EndedAt are Unix milliseconds (0 when unknown).
	StartedAt int64 `json:"startedAt"`
	EndedAt   int64 `json:"endedAt"`
}

// AgentWait asks the gateway to wait up to timeout for a run to finish
// (agent.wait). Useful for a run started by another connection; for runs of this
// client, AgentRun.Wait is cheaper. ctx should outlast timeout.
//
// Errors: errdefs.ErrInvalidSpec for an empty run id or a negative timeout;
// ErrMalformedFrame for an answer that does not decode; otherwise those of
// Request.
func (c *Client) AgentWait(ctx context.Context, runID string, timeout time.Duration) (*WaitStatus, error) {
	if strings.TrimSpace(runID) == "" || timeout < 0 {
		return nil, errdefs.Invalidf("agent.wait needs a run id and a non-negative timeout")
	}
	params := struct {
		RunID     string `json:"runId"`
		TimeoutMs int64  `json:"timeoutMs"`
	}{strings.TrimSpace(runID), timeout.Milliseconds()}
	var ws WaitStatus
	if _, err := c.requestInto(ctx, "agent.wait", params, &ws); err != nil {
		return nil, err
	}
	return &ws, nil
}
