package openclaw_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

// TestProviderEntryIsWhatTheConfigWrites: the builder a running gateway is
// patched with and the config file agree byte for byte.
func TestProviderEntryIsWhatTheConfigWrites(t *testing.T) {
	models := []openclaw.Model{
		{ID: "gpt-4o-mini", ContextWindow: 128000, MaxTokens: 16384},
		{ID: "vision/large", Name: "Large", ContextWindow: 200000, MaxTokens: 8192, Reasoning: true, Images: true},
	}
	cfg, err := openclaw.NewConfig(openclaw.WithModels(models...), openclaw.WithBaseURL("http://127.0.0.1:4100/r/tok/v1/"))
	require.NoError(t, err)
	fromConfig, ok := cfg.Lookup("models.providers." + openclaw.DefaultProvider)
	require.True(t, ok)

	entry, err := openclaw.ProviderEntry("http://127.0.0.1:4100/r/tok/v1/", models...)
	require.NoError(t, err)
	a, err := json.Marshal(entry)
	require.NoError(t, err)
	b, err := json.Marshal(fromConfig)
	require.NoError(t, err)
	assert.JSONEq(t, string(b), string(a))

	assert.JSONEq(t, `{
		"baseUrl": "http://127.0.0.1:4100/r/tok/v1",
		"apiKey": "proxy-injects-auth",
		"api": "openai-completions",
		"models": [
			{"id": "gpt-4o-mini", "name": "gpt-4o-mini", "reasoning": false, "input": ["text"],
			 "contextWindow": 128000, "maxTokens": 16384,
			 "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}},
			{"id": "vision/large", "name": "Large", "reasoning": true, "input": ["text", "image"],
			 "contextWindow": 200000, "maxTokens": 8192,
			 "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}
		]}`, string(a))
	assert.Equal(t, openclaw.PlaceholderAPIKey, entry["apiKey"])
}

func TestProviderEntryRejectsBadInput(t *testing.T) {
	good := openclaw.Model{ID: "m", ContextWindow: 10, MaxTokens: 5}
	for name, tc := range map[string]struct {
		url    string
		models []openclaw.Model
	}{
		"no models":     {"http://127.0.0.1/v1", nil},
		"bad model":     {"http://127.0.0.1/v1", []openclaw.Model{{ID: "has space", ContextWindow: 10, MaxTokens: 5}}},
		"twice":         {"http://127.0.0.1/v1", []openclaw.Model{good, good}},
		"not http":      {"ftp://127.0.0.1/v1", []openclaw.Model{good}},
		"credentials":   {"http://u:p@127.0.0.1/v1", []openclaw.Model{good}},
		"query":         {"http://127.0.0.1/v1?x=1", []openclaw.Model{good}},
		"relative path": {"/v1", []openclaw.Model{good}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := openclaw.ProviderEntry(tc.url, tc.models...)
			assert.ErrorIs(t, err, port.ErrInvalidSpec)
			var se *openclaw.SettingError
			assert.ErrorAs(t, err, &se)
		})
	}
}
