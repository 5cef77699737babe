package gateway

import (
	"context"
	"strings"

	"github.com/agentsandbox/sandbox/errdefs"
)

// Abort asks the gateway to abort the runs of a session (chat.abort), or only
// runID when it is not empty. It reports whether the gateway confirmed an abort
// (of runID, when given).
//
// Errors: errdefs.ErrInvalidSpec for an empty session key; ErrMalformedFrame for
// an answer that does not decode; otherwise those of Request.
func (c *Client) Abort(ctx context.Context, sessionKey, runID string) (bool, error) {
	sessionKey = strings.TrimSpace(sessionKey)
	if sessionKey == "" {
		return false, errdefs.Invalidf("abort needs a session key")
	}
	params := struct {
		SessionKey string `json:"sessionKey"`
		RunID      string `json:"runId,omitempty"`
	}{sessionKey, strings.TrimSpace(runID)}
	var out struct {
		Aborted bool     `json:"aborted"`
		RunIDs  []string `json:"runIds"`
	}
	if _, err := c.requestInto(ctx, "chat.abort", params, &out); err != nil {
		return false, err
	}
	if !out.Aborted {
		return false, nil
	}
	if params.RunID == "" || out.RunIDs == nil {
		return true, nil
	}
	for _, id := range out.RunIDs {
		if id == params.RunID {
			return true, nil
		}
	}
	return false, nil
}
