package gateway

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/agentsandbox/sandbox/errdefs"
)

// SessionPatch is a change to a session's settings (sessions.patch). Exactly the
// fields set are sent; the gateway's schema is closed.
type SessionPatch struct {
	// Model selects the session's model ("provider/model" or an alias).
	Model string
	// ClearModel resets the session to the configured model.
	ClearModel bool
	// OutboundHeaders sets headers the gateway adds to the session's LLM calls.
	// Only the original system's patched fork has this field; upstream OpenClaw
	// refuses it with INVALID_REQUEST ("unexpected property 'outboundHeaders'").
	// Nil leaves it out; an empty, non-nil map sends {}.
	OutboundHeaders map[string]string
}

// SessionPatchResult is the gateway's answer to sessions.patch.
type SessionPatchResult struct {
	// Key is the session's canonical key.
	Key string
	// ModelProvider and Model are the model the session resolves to now.
	ModelProvider string
	Model         string
	// Raw is the whole response payload.
	Raw json.RawMessage
}

// SessionsPatch changes a session's settings, e.g. its model before a run.
//
// Errors: errdefs.ErrInvalidSpec for an empty key or a patch that changes
// nothing or sets both Model and ClearModel; an *Error when the gateway refuses
// the patch (an unknown model, a field it does not know); ErrMalformedFrame for
// an answer that does not decode; otherwise those of Request.
func (c *Client) SessionsPatch(ctx context.Context, key string, patch SessionPatch) (*SessionPatchResult, error) {
	key = strings.TrimSpace(key)
	if key == "" {
		return nil, errdefs.Invalidf("sessions.patch needs a session key")
	}
	params := map[string]any{"key": key}
	switch {
	case patch.ClearModel && patch.Model != "":
		return nil, errdefs.Invalidf("sessions.patch: both Model and ClearModel set")
	case patch.ClearModel:
		params["model"] = nil
	case strings.TrimSpace(patch.Model) != "":
		params["model"] = strings.TrimSpace(patch.Model)
	case patch.OutboundHeaders == nil:
		return nil, errdefs.Invalidf("sessions.patch: nothing to change")
	}
	if patch.OutboundHeaders != nil {
		params["outboundHeaders"] = patch.OutboundHeaders
	}
	var out struct {
		Key      string `json:"key"`
		Resolved struct {
			ModelProvider string `json:"modelProvider"`
			Model         string `json:"model"`
		} `json:"resolved"`
	}
	raw, err := c.requestInto(ctx, "sessions.patch", params, &out)
	if err != nil {
		return nil, err
	}
	return &SessionPatchResult{Key: out.Key, ModelProvider: out.Resolved.ModelProvider, Model: out.Resolved.Model, Raw: raw}, nil
}
