package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/errdefs"
)

// AgentRequest is one agent turn. Only fields the gateway's closed `agent`
// schema allows are sent.
type AgentRequest struct {
	// Message is the user message (required).
	Message string
	// SessionKey names the session (required). Events are delivered to the run
	// only when they carry this key (canonicalised; see CanonicalSessionKey).
	SessionKey string
	// AgentID selects the agent (default: the gateway's default agent, "main").
	AgentID string
	// IdempotencyKey deduplicates retries; the gateway uses it as the run id.
	// Generated when empty.
	IdempotencyKey string
	// Model overrides the model for this turn ("provider/model"), if set.
	Model string
	// Timeout is the gateway-side run timeout, sent in whole seconds (rounded
	// up); 0 leaves the gateway's default.
	Timeout time.Duration
	// ExtraSystemPrompt is appended to the agent's system prompt, if set.
	ExtraSystemPrompt string
}

// agentParams is the wire form of AgentRequest.
type agentParams struct {
	Message           string `json:"message"`
	IdempotencyKey    string `json:"idempotencyKey"`
	AgentID           string `json:"agentId,omitempty"`
	SessionKey        string `json:"sessionKey,omitempty"`
	Model             string `json:"model,omitempty"`
	Timeout           int64  `json:"timeout,omitempty"`
	ExtraSystemPrompt string `json:"extraSystemPrompt,omitempty"`
}

// Agent starts an agent turn and returns once the gateway has accepted it.
// ctx bounds the submission only; use Wait's context to bound the run, and
// Abort to stop it. A ctx that ends before the gateway accepted may still leave
// the run going on the gateway: abort it by session key and IdempotencyKey.
// Events of other runs and other sessions never reach the returned run: an
// event is delivered only if its runId matches and its sessionKey canonically
// equals the run's (events without either are dropped).
//
// Errors: errdefs.ErrInvalidSpec for a bad request or a run id already running
// on this connection; *Error when the gateway rejects the run; ErrClosed when
// the connection ends before the gateway accepted; the context's error.
func (c *Client) Agent(ctx context.Context, req AgentRequest) (*AgentRun, error) {
	p, err := req.params()
	if err != nil {
		return nil, err
	}
	r := newAgentRun(c, p)
	cl := &call{id: c.newID(), method: "agent", stream: r, runID: p.IdempotencyKey}
	if err := c.send(ctx, cl, p); err != nil {
		return nil, err
	}
	select {
	case <-r.accepted:
		return r, nil
	case <-r.done:
		select {
		case <-r.accepted: // accepted, then ended at once: Wait reports how
			return r, nil
		default:
		}
		if r.err != nil && r.result.Status == "" {
			return nil, r.err // rejected (or the connection ended) before acceptance
		}
		return r, nil // finished without an accepted response (a deduplicated run)
	case <-ctx.Done():
		select {
		case <-r.accepted:
			return r, nil
		default:
		}
		c.forget(cl)
		return nil, fmt.Errorf("gateway agent: waiting for acceptance: %w", ctx.Err())
	}
}

func (req AgentRequest) params() (agentParams, error) {
	p := agentParams{
		Message:           req.Message,
		IdempotencyKey:    strings.TrimSpace(req.IdempotencyKey),
		AgentID:           strings.TrimSpace(req.AgentID),
		SessionKey:        strings.TrimSpace(req.SessionKey),
		Model:             strings.TrimSpace(req.Model),
		ExtraSystemPrompt: req.ExtraSystemPrompt,
	}
	switch {
	case strings.TrimSpace(req.Message) == "":
		return p, errdefs.Invalidf("agent message is empty")
	case p.SessionKey == "":
		return p, errdefs.Invalidf("agent session key is required: events are filtered by it")
	case p.AgentID != "" && !ValidAgentID(p.AgentID):
		return p, errdefs.Invalidf("agent id %q", req.AgentID)
	case req.Timeout < 0:
		return p, errdefs.Invalidf("agent timeout %s is negative", req.Timeout)
	}
	if p.IdempotencyKey == "" {
		p.IdempotencyKey = newUUID()
	}
	if req.Timeout > 0 {
		p.Timeout = int64((req.Timeout + time.Second - 1) / time.Second)
	}
	return p, nil
}
