package openclaw_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

// The catalog read from a LiteLLM (the fake, which serves /v1/models and
// /model/info as LiteLLM does) becomes the provider's models, and the config
// lists exactly them with zero costs.
func TestModelsFromLiteLLMCatalog(t *testing.T) {
	fake := litellmtest.NewServer(litellmtest.WithModels(
		litellmtest.Model{Name: "gpt-4o-mini", Provider: "openai", MaxInputTokens: 128000, MaxOutputTokens: 16384, InputCostPerToken: 0.15e-6, Vision: true},
		litellmtest.Model{Name: "o-think", Provider: "openai", MaxInputTokens: 200000, MaxOutputTokens: 100000, Reasoning: true},
		litellmtest.Model{Name: "custom", Provider: "openai"},
		litellmtest.Model{Name: "tiny", Provider: "openai", MaxInputTokens: 2048, MaxOutputTokens: 8192},
	))
	defer fake.Close()
	c, err := litellm.New(litellm.WithBaseURL(fake.URL), litellm.WithMasterKey(fake.MasterKey()))
	require.NoError(t, err)
	catalog, err := c.Models(context.Background())
	require.NoError(t, err)

	models, err := openclaw.ModelsFromLiteLLM(catalog)
	require.NoError(t, err)
	assert.Equal(t, []openclaw.Model{
		{ID: "gpt-4o-mini", ContextWindow: 128000, MaxTokens: 16384, Images: true},
		{ID: "o-think", ContextWindow: 200000, MaxTokens: 100000, Reasoning: true},
		{ID: "custom", ContextWindow: openclaw.UnknownContextWindow, MaxTokens: openclaw.UnknownMaxTokens},
		{ID: "tiny", ContextWindow: 2048, MaxTokens: 2048}, // output capped to the window
	}, models)

	cfg, err := openclaw.NewConfig(openclaw.WithModels(models...), openclaw.WithDefaultModel("gpt-4o-mini"))
	require.NoError(t, err)
	assert.Equal(t, "litellm/gpt-4o-mini", cfg.ModelRef())
	got, ok := cfg.Lookup("models.providers.litellm.models")
	require.True(t, ok)
	list := got.([]any)
	require.Len(t, list, 4)
	for i, m := range list {
		e := m.(map[string]any)
		assert.Equal(t, models[i].ID, e["id"])
		for _, k := range []string{"input", "output", "cacheRead", "cacheWrite"} {
			assert.Equal(t, "0", e["cost"].(map[string]any)[k].(interface{ String() string }).String(), "LiteLLM prices never reach OpenClaw")
		}
	}
}

func TestModelsFromLiteLLMRefuses(t *testing.T) {
	_, err := openclaw.ModelsFromLiteLLM(nil)
	assert.ErrorIs(t, err, port.ErrInvalidSpec)

	_, err = openclaw.ModelsFromLiteLLM([]litellm.ModelInfo{
		{ID: "fine", ContextWindow: 1000, MaxOutputTokens: 100},
		{ID: "bad id\n", ContextWindow: 1000, MaxOutputTokens: 100},
	})
	var se *openclaw.SettingError
	require.ErrorAs(t, err, &se)
	assert.Contains(t, se.Reason, `"bad id\n"`)
	assert.ErrorIs(t, err, port.ErrInvalidSpec)
}
