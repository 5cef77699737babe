package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentsandbox/sandbox/errdefs"
)

// ConfigPatch is a change to the gateway's config (config.patch), which the
// gateway validates, writes and hot-reloads.
type ConfigPatch struct {
	// Patch is a JSON merge patch (RFC 7396) of the config: objects merge, a null
	// value deletes its key. Required.
	Patch map[string]any
	// BaseHash is the ConfigSnapshot.Hash the patch was computed against
	// (required): the gateway refuses the patch when the config changed since.
	BaseHash string
	// ReplacePaths names the array paths the patch may shrink (for example
	// "models.providers.<name>.models" of a provider it deletes); the gateway
	// refuses a patch that drops array entries anywhere else.
	ReplacePaths []string
	// Note is free text the gateway records with the write.
	Note string
}

// ConfigPatchResult is the gateway's answer to config.patch.
type ConfigPatchResult struct {
	// Hash identifies the config revision after the write (empty for a no-op).
	Hash string `json:"hash"`
	// ChangedPaths lists the config paths the patch changed.
	ChangedPaths []string `json:"changedPaths"`
	// Noop reports a patch that changed nothing.
	Noop bool `json:"noop"`
	// Raw is the whole response payload.
	Raw json.RawMessage `json:"-"`
}

// ConfigPatch applies a merge patch to the gateway's config. The gateway
// rate-limits config writes (30 a minute per client in 2026.9.6): a refusal for
// that is an *Error with Retryable set and RetryAfter.
//
// Errors: errdefs.ErrInvalidSpec for an empty patch or base hash, or a patch
// that does not encode; an *Error when the gateway refuses it, which matches
// ErrConfigChanged when the base hash is stale; ErrMalformedFrame for an answer
// that does not decode; otherwise those of Request.
func (c *Client) ConfigPatch(ctx context.Context, p ConfigPatch) (*ConfigPatchResult, error) {
	if len(p.Patch) == 0 || strings.TrimSpace(p.BaseHash) == "" {
		return nil, errdefs.Invalidf("config.patch needs a patch and a base hash")
	}
	raw, err := json.Marshal(p.Patch)
	if err != nil {
		return nil, fmt.Errorf("gateway config.patch: %w: %v", errdefs.ErrInvalidSpec, err)
	}
	params := struct {
		Raw          string   `json:"raw"`
		BaseHash     string   `json:"baseHash"`
		ReplacePaths []string `json:"replacePaths,omitempty"`
		Note         string   `json:"note,omitempty"`
	}{string(raw), p.BaseHash, p.ReplacePaths, p.Note}
	var out ConfigPatchResult
	payload, err := c.requestInto(ctx, "config.patch", params, &out)
	if err != nil {
		return nil, err
	}
	out.Raw = payload
	return &out, nil
}
