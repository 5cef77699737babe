package litellm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/agentsandbox/sandbox/errdefs"
)

// KeyRequest is the body of LiteLLM's POST /key/generate (its GenerateKeyRequest):
// a virtual key, limited as the fields say. Zero fields are left out, so LiteLLM's
// defaults apply.
type KeyRequest struct {
	// KeyAlias names the key in LiteLLM's UI and spend logs.
	KeyAlias string `json:"key_alias,omitempty"`
	// Duration is how long the key lives, as LiteLLM parses it ("30m", "1h", "7d");
	// empty means no expiry.
	Duration string `json:"duration,omitempty"`
	// Models limits the key to these model names; empty means every model.
	Models []string `json:"models,omitempty"`
	// MaxBudget is the key's spend limit in USD; LiteLLM refuses calls once the
	// key's spend reaches it (HTTP 400, type "budget_exceeded").
	MaxBudget *float64 `json:"max_budget,omitempty"`
	// BudgetDuration resets the key's spend periodically ("1d", "30d").
	BudgetDuration string `json:"budget_duration,omitempty"`
	// AllowedRoutes limits the routes the key may call: exact paths, paths ending
	// in "*", or names of LiteLLM's route groups ("llm_api_routes", which includes
	// LiteLLM's MCP and agent routes too). LiteLLM answers any other route with
	// HTTP 403. proxypolicy.KeyRoutes lists the routes the library's proxies forward.
	AllowedRoutes []string `json:"allowed_routes,omitempty"`
	// Metadata is stored with the key.
	Metadata map[string]any `json:"metadata,omitempty"`
	// UserID and TeamID own the key.
	UserID string `json:"user_id,omitempty"`
	TeamID string `json:"team_id,omitempty"`
	// RPMLimit and TPMLimit bound the key's requests and tokens per minute.
	RPMLimit *int64 `json:"rpm_limit,omitempty"`
	TPMLimit *int64 `json:"tpm_limit,omitempty"`
	// MaxParallelRequests bounds the key's concurrent requests.
	MaxParallelRequests *int `json:"max_parallel_requests,omitempty"`
}

// Key is LiteLLM's answer to /key/generate (its GenerateKeyResponse). Key is the
// secret: it formats and logs as redacted; hand it to the proxy and nowhere else.
type Key struct {
	// Key is the virtual key itself ("sk-...").
	Key string `json:"key"`
	// KeyName is LiteLLM's abbreviation of it ("sk-...abcd"), safe to show.
	KeyName string `json:"key_name"`
	// Token is the key's hash (sha256 hex), what spend logs record as api_key;
	// TokenID identifies it for management calls.
	Token   string `json:"token"`
	TokenID string `json:"token_id"`
	// The limits as LiteLLM stored them.
	KeyAlias      string   `json:"key_alias"`
	Models        []string `json:"models"`
	MaxBudget     *float64 `json:"max_budget"`
	AllowedRoutes []string `json:"allowed_routes"`
	UserID        string   `json:"user_id"`
	// Expires is when the key stops working; zero for never.
	Expires time.Time `json:"-"`
}

// String redacts the secret.
func (k Key) String() string { return fmt.Sprintf("litellm.Key{%s %s}", k.KeyName, k.KeyAlias) }

// GoString redacts the secret.
func (k Key) GoString() string { return k.String() }

// LogValue redacts the secret.
func (k Key) LogValue() slog.Value {
	return slog.GroupValue(slog.String("key_name", k.KeyName), slog.String("key_alias", k.KeyAlias))
}

// GenerateKey creates a virtual key with the master key (POST /key/generate). Use it
// to give a proxy a key restricted to the LLM routes, with a budget, instead of the
// master key. It is not retried (a retry could create a second key). Errors:
// *APIError (ErrUnauthorized for a key that may not create keys), errdefs.ErrUnavailable
// when LiteLLM cannot be reached, ErrMalformed for an answer without a key.
func (c *Client) GenerateKey(ctx context.Context, req KeyRequest) (*Key, error) {
	var raw struct {
		Key
		Expires json.RawMessage `json:"expires"`
	}
	if err := c.post(ctx, "/key/generate", req, &raw); err != nil {
		return nil, err
	}
	if raw.Key.Key == "" {
		return nil, malformed("/key/generate", "no key in the answer")
	}
	k := raw.Key
	if len(raw.Expires) > 0 && string(raw.Expires) != "null" {
		t, err := parseTime(raw.Expires)
		if err != nil {
			return nil, malformed("/key/generate", "expires %s", raw.Expires)
		}
		k.Expires = t
	}
	return &k, nil
}

// DeleteKeys deletes virtual keys (POST /key/delete), so they stop working at once.
// A key LiteLLM does not know gives an *APIError (errdefs.ErrNotFound).
func (c *Client) DeleteKeys(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	var out struct {
		DeletedKeys []string `json:"deleted_keys"`
	}
	return c.post(ctx, "/key/delete", map[string]any{"keys": keys}, &out)
}

// post sends body as JSON to path once (management writes are not idempotent) and
// decodes a 2xx answer into out.
func (c *Client) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return errdefs.Invalidf("request: %v", err)
	}
	u := *c.base
	u.Path = c.base.Path + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(b))
	if err != nil {
		return errdefs.Invalidf("request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.rc.HTTPClient.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		return &unavailableError{method: http.MethodPost, path: path, attempts: 1, err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &unavailableError{method: http.MethodPost, path: path, attempts: 1, err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return parseAPIError(http.MethodPost, path, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return malformed(path, "%v", err)
	}
	return nil
}
