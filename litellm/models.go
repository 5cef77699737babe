package litellm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentsandbox/sandbox/errdefs"
)

// ModelInfo is one entry of the model catalog.
type ModelInfo struct {
	// ID is the name clients send as "model".
	ID string
	// DisplayName is model_info.display_name where LiteLLM has one, else ID.
	DisplayName string
	// OwnedBy is /v1/models' owned_by; Provider is model_info.litellm_provider.
	OwnedBy, Provider string
	// ContextWindow is the input limit in tokens (max_input_tokens, else
	// max_tokens); 0 when unknown.
	ContextWindow int
	// MaxOutputTokens is max_output_tokens (else max_tokens); 0 when unknown.
	MaxOutputTokens int
	// InputCostPerToken and OutputCostPerToken are LiteLLM's prices in USD; 0 when
	// unknown.
	InputCostPerToken, OutputCostPerToken float64
	// SupportsVision and SupportsReasoning are model_info.supports_vision and
	// supports_reasoning: image input, and separate reasoning output.
	SupportsVision, SupportsReasoning bool
}

// Models returns the catalog: every model of /v1/models, with context window, output
// limit and prices from /model/info where the proxy serves it (keys without access to
// /model/info, and older proxies, still get the plain list). Errors as SpendLogsV2.
func (c *Client) Models(ctx context.Context) ([]ModelInfo, error) {
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	err := c.getJSON(ctx, "/v1/models", nil, &list)
	if err != nil {
		return nil, fmt.Errorf("litellm: models: %w", err)
	}
	out := make([]ModelInfo, 0, len(list.Data))
	index := map[string]int{}
	for _, m := range list.Data {
		if m.ID == "" {
			continue
		}
		index[m.ID] = len(out)
		out = append(out, ModelInfo{ID: m.ID, DisplayName: m.ID, OwnedBy: m.OwnedBy})
	}

	var info modelInfoPage
	err = c.getJSON(ctx, "/model/info", nil, &info)
	var apiErr *APIError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, fmt.Errorf("litellm: model info: %w", ctx.Err())
	case errors.As(err, &apiErr) && apiErr.StatusCode < 500 && apiErr.StatusCode != http.StatusTooManyRequests:
		// Not served, or not to this key: the plain list is the catalog.
		c.log.Debug("litellm: /model/info not available", "status", apiErr.StatusCode)
		return out, nil
	default:
		return nil, fmt.Errorf("litellm: model info: %w", err)
	}
	mergeModelInfo(out, index, info)
	return out, nil
}

// modelInfoPage is /model/info's answer (what Models reads of it).
type modelInfoPage struct {
	Data []struct {
		ModelName string `json:"model_name"`
		ModelInfo struct {
			DisplayName     string   `json:"display_name"`
			Provider        string   `json:"litellm_provider"`
			MaxTokens       *float64 `json:"max_tokens"`
			MaxInputTokens  *float64 `json:"max_input_tokens"`
			MaxOutputTokens *float64 `json:"max_output_tokens"`
			InputCost       *float64 `json:"input_cost_per_token"`
			OutputCost      *float64 `json:"output_cost_per_token"`
			Vision          bool     `json:"supports_vision"`
			Reasoning       bool     `json:"supports_reasoning"`
		} `json:"model_info"`
	} `json:"data"`
}

// mergeModelInfo fills out's models (by index) from /model/info. A model group may
// have several deployments: the first known value wins.
func mergeModelInfo(out []ModelInfo, index map[string]int, info modelInfoPage) {
	num := func(p *float64) int {
		if p == nil || *p <= 0 {
			return 0
		}
		return int(*p)
	}
	for _, d := range info.Data {
		i, ok := index[d.ModelName]
		if !ok {
			continue
		}
		m, mi := &out[i], d.ModelInfo
		if m.DisplayName == m.ID && strings.TrimSpace(mi.DisplayName) != "" {
			m.DisplayName = mi.DisplayName
		}
		if m.Provider == "" {
			m.Provider = mi.Provider
		}
		if m.ContextWindow == 0 {
			m.ContextWindow = num(mi.MaxInputTokens)
			if m.ContextWindow == 0 {
				m.ContextWindow = num(mi.MaxTokens)
			}
		}
		if m.MaxOutputTokens == 0 {
			m.MaxOutputTokens = num(mi.MaxOutputTokens)
			if m.MaxOutputTokens == 0 {
				m.MaxOutputTokens = num(mi.MaxTokens)
			}
		}
		if m.InputCostPerToken == 0 && mi.InputCost != nil {
			m.InputCostPerToken = *mi.InputCost
		}
		if m.OutputCostPerToken == 0 && mi.OutputCost != nil {
			m.OutputCostPerToken = *mi.OutputCost
		}
		m.SupportsVision = m.SupportsVision || mi.Vision
		m.SupportsReasoning = m.SupportsReasoning || mi.Reasoning
	}
}

// Liveliness checks LiteLLM's public /health/liveliness ("I'm alive!"). Errors:
// errdefs.ErrUnavailable when it cannot be reached or is failing, ErrMalformed for
// another answer.
func (c *Client) Liveliness(ctx context.Context) error {
	const path = "/health/liveliness"
	err := c.get(ctx, path, nil, func(body []byte) error {
		var s string
		if json.Unmarshal(body, &s) != nil {
			s = string(body)
		}
		if !strings.Contains(strings.ToLower(s), "alive") {
			return malformed(path, "unexpected answer %q", snippet(body))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("litellm: liveliness: %w", err)
	}
	return nil
}

// Readiness is /health/readiness.
type Readiness struct {
	// Status is "connected" or "healthy" when ready.
	Status string `json:"status"`
	// DB is the database state ("connected", "Not connected", ...).
	DB             string `json:"db"`
	LiteLLMVersion string `json:"litellm_version"`
}

// Readiness reads /health/readiness. An unhealthy proxy answers 503, which is an
// *APIError matching errdefs.ErrUnavailable.
func (c *Client) Readiness(ctx context.Context) (*Readiness, error) {
	var r Readiness
	err := c.getJSON(ctx, "/health/readiness", nil, &r)
	if err != nil {
		return nil, fmt.Errorf("litellm: readiness: %w", err)
	}
	return &r, nil
}

// Customer is LiteLLM's end user (/customer/info).
type Customer struct {
	UserID  string  `json:"user_id"`
	Alias   string  `json:"alias"`
	Blocked bool    `json:"blocked"`
	Spend   float64 `json:"spend"`
	// DefaultModel and AllowedModelRegion are set when configured.
	DefaultModel       string `json:"default_model"`
	AllowedModelRegion string `json:"allowed_model_region"`
}

// CustomerInfo reads /customer/info for an end user. An unknown end user is an
// *APIError matching errdefs.ErrNotFound.
func (c *Client) CustomerInfo(ctx context.Context, endUserID string) (*Customer, error) {
	if endUserID == "" {
		return nil, errdefs.Invalidf("empty end user id")
	}
	var cu Customer
	err := c.getJSON(ctx, "/customer/info", map[string][]string{"end_user_id": {endUserID}}, &cu)
	if err != nil {
		return nil, fmt.Errorf("litellm: customer %s: %w", endUserID, err)
	}
	return &cu, nil
}
