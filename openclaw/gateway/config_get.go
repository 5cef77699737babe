package gateway

import (
	"context"
	"encoding/json"
	"fmt"
)

// ConfigSnapshot is the gateway's answer to config.get, decoded loosely.
type ConfigSnapshot struct {
	// Path is the config file the gateway runs from.
	Path string `json:"path"`
	// Exists and Valid describe that file.
	Exists bool `json:"exists"`
	Valid  bool `json:"valid"`
	// Hash identifies this revision of the file: ConfigPatch needs it as
	// BaseHash, so that a write based on an older revision is refused.
	Hash string `json:"hash"`
	// Config is the effective config, with secrets redacted by the gateway.
	Config json.RawMessage `json:"config"`
	// Raw is the whole response payload.
	Raw json.RawMessage `json:"-"`
}

// ConfigGet reads the gateway's config (config.get).
//
// Errors: ErrMalformedFrame for an answer that does not decode or has no hash;
// otherwise those of Request.
func (c *Client) ConfigGet(ctx context.Context) (*ConfigSnapshot, error) {
	var s ConfigSnapshot
	raw, err := c.requestInto(ctx, "config.get", struct{}{}, &s)
	if err != nil {
		return nil, err
	}
	if s.Hash == "" {
		return nil, fmt.Errorf("gateway config.get: %w: no hash in the response", ErrMalformedFrame)
	}
	s.Raw = raw
	return &s, nil
}
