package openclaw

import (
	"errors"

	"github.com/agentsandbox/sandbox/litellm"
)

// Limits assumed for a catalog model whose limits LiteLLM does not know (a custom
// deployment without model_info). They are deliberately small: OpenClaw then
// compacts early instead of sending a request the model rejects.
const (
	UnknownContextWindow = 32768
	UnknownMaxTokens     = 4096
)

// ModelsFromLiteLLM turns LiteLLM's model catalog (litellm.Client.Models) into the
// provider's models, in order: the id is the alias the proxy routes, the display
// name, context window, output limit, image input and reasoning come from
// /model/info. Unknown limits take UnknownContextWindow and UnknownMaxTokens, and an
// output limit above the context window is capped to it. Prices are dropped:
// LiteLLM stays the billing truth.
//
// An entry that cannot be a model (an id with whitespace, say) fails the whole
// catalog with a *SettingError naming it, rather than silently shrinking what the
// agent may use. An empty catalog is an error too.
func ModelsFromLiteLLM(catalog []litellm.ModelInfo) ([]Model, error) {
	if len(catalog) == 0 {
		return nil, &SettingError{Setting: "models.providers.*.models", Reason: "the LiteLLM catalog has no models"}
	}
	out := make([]Model, 0, len(catalog))
	var errs []error
	for _, info := range catalog {
		m := Model{
			ID:            info.ID,
			ContextWindow: info.ContextWindow,
			MaxTokens:     info.MaxOutputTokens,
			Reasoning:     info.SupportsReasoning,
			Images:        info.SupportsVision,
		}
		if info.DisplayName != info.ID {
			m.Name = info.DisplayName
		}
		if m.ContextWindow <= 0 {
			m.ContextWindow = UnknownContextWindow
		}
		if m.MaxTokens <= 0 {
			m.MaxTokens = min(UnknownMaxTokens, m.ContextWindow)
		}
		m.MaxTokens = min(m.MaxTokens, m.ContextWindow)
		if err := m.validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, m)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
