package openclaw

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Model is one entry of the proxy provider's model catalog: a model the agent may
// use, named by the alias the LLM proxy (LiteLLM) knows it by. Fill it from any
// catalog source with NewModel or a struct literal; NewConfig validates it.
//
// There are no cost fields on purpose: OpenClaw's own cost tracking is a UX hint
// at best, LiteLLM is the billing truth, so every cost is written as zero.
type Model struct {
	// ID is the model alias sent as "model" in chat completion requests,
	// e.g. "gemini-2.5-flash". It may contain '/'.
	ID string
	// Name is a display name; empty means ID.
	Name string
	// ContextWindow is the model's context window in tokens (> 0).
	ContextWindow int
	// MaxTokens is the largest completion the model returns, in tokens (> 0).
	MaxTokens int
	// Reasoning marks a model that produces separate reasoning output.
	Reasoning bool
	// Images marks a model that accepts image input besides text.
	Images bool
}

// NewModel returns a Model after checking it. Errors are *SettingError values
// wrapping port.ErrInvalidSpec.
func NewModel(id, name string, contextWindow, maxTokens int) (Model, error) {
	m := Model{ID: id, Name: name, ContextWindow: contextWindow, MaxTokens: maxTokens}
	return m, m.validate()
}

func (m Model) validate() error {
	const setting = "models.providers.*.models"
	if m.ID == "" || !utf8.ValidString(m.ID) || strings.IndexFunc(m.ID, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}) >= 0 {
		return &SettingError{Setting: setting, Reason: "model id " + quote(m.ID) + " is empty or has whitespace or control characters"}
	}
	if len(m.ID) > 256 {
		return &SettingError{Setting: setting, Reason: "model id " + quote(m.ID[:32]+"…") + " is longer than 256 bytes"}
	}
	if !utf8.ValidString(m.Name) || strings.IndexFunc(m.Name, unicode.IsControl) >= 0 {
		return &SettingError{Setting: setting, Reason: "model " + quote(m.ID) + ": name has control characters or is not UTF-8"}
	}
	if m.ContextWindow <= 0 || m.MaxTokens <= 0 {
		return &SettingError{Setting: setting, Reason: "model " + quote(m.ID) + ": context window and max tokens must be positive"}
	}
	if m.MaxTokens > m.ContextWindow {
		return &SettingError{Setting: setting, Reason: "model " + quote(m.ID) + ": max tokens exceed the context window"}
	}
	return nil
}

// ProviderAPI is the API of every provider this package writes: OpenAI chat
// completions, which LiteLLM and the proxies in front of it serve.
const ProviderAPI = "openai-completions"

// ProviderEntry returns the models.providers.<name> object of an OpenClaw
// config for a provider at baseURL offering models: the one shape NewConfig
// writes and a config.patch on a running gateway adds (openclaw/billing). Its
// apiKey is PlaceholderAPIKey (the proxy in front of the provider injects the
// real key) and every cost is zero (LiteLLM is the billing truth).
//
// baseURL and models are checked as WithBaseURL and WithModels check them;
// errors are *SettingError values wrapping port.ErrInvalidSpec.
func ProviderEntry(baseURL string, models ...Model) (map[string]any, error) {
	var c config
	for _, o := range []Option{WithBaseURL(baseURL), WithModels(models...)} {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	return providerEntry(c.baseURL, c.models), nil
}

// providerEntry builds the provider object from checked values.
func providerEntry(baseURL string, models []Model) map[string]any {
	entries := make([]any, len(models))
	for i, m := range models {
		entries[i] = m.entry()
	}
	return map[string]any{
		"baseUrl": baseURL,
		"apiKey":  PlaceholderAPIKey,
		"api":     ProviderAPI,
		"models":  entries,
	}
}

// entry renders the model as an OpenClaw provider model object.
func (m Model) entry() map[string]any {
	name := m.Name
	if name == "" {
		name = m.ID
	}
	input := []any{"text"}
	if m.Images {
		input = append(input, "image")
	}
	return map[string]any{
		"id":            m.ID,
		"name":          name,
		"reasoning":     m.Reasoning,
		"input":         input,
		"contextWindow": m.ContextWindow,
		"maxTokens":     m.MaxTokens,
		"cost":          map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
	}
}
