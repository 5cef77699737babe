package llmproxy

import (
	"encoding/json"
	"fmt"
	"strings"
)

// What providers bill for tools beyond the bytes of their definitions, per call,
// from their documentation (Anthropic: platform.claude.com/docs, "Tool use with
// Claude" > Pricing, and the pages of the bash, text editor and computer use
// tools). A token budget reserves these before forwarding a call with tools.
const (
	// toolUseSystemPrompt is the largest tool-use system prompt Anthropic adds to
	// a call with any tool: 530 tokens (Claude 3 Opus, tool_choice auto; Claude 4
	// models: 346 auto or none, 313 any or tool). OpenAI renders function tools
	// into the prompt in fewer tokens than their JSON has bytes plus a short
	// header, which this also covers.
	toolUseSystemPrompt = 530
	// bashToolTokens: the bash tool (bash_*) adds 245 input tokens.
	bashToolTokens = 245
	// textEditorToolTokens: the text editor tool (text_editor_*) adds 700.
	textEditorToolTokens = 700
	// computerToolTokens: the computer use tool (computer_*) adds 735 for its
	// definition and up to 499 of system prompt.
	computerToolTokens = 735 + 499
)

// clientToolTokens maps the tool types whose cost a budget can bound (tools the
// agent's own code runs: the model only writes their calls) to what each adds
// beyond its definition's bytes. Versioned Anthropic types match by prefix.
// Every other type is a server-side tool (web search, web fetch, code
// execution, file search, MCP, image generation, ...) whose results the
// provider bills as input tokens no request field bounds, or one not known
// here: under a token budget both are refused (an allowlist, not a denylist).
var clientToolTokens = map[string]int64{
	"":             0, // an Anthropic custom tool (name, input_schema)
	"function":     0, // OpenAI chat and Responses function tools
	"custom":       0, // custom tools (free-form input)
	"bash_":        bashToolTokens,
	"text_editor_": textEditorToolTokens,
	"computer_":    computerToolTokens,
}

// toolTokens is what a body's tools add to a call's prompt bound: the tool-use
// system prompt once when any tool (or legacy function) is offered, plus each
// built-in tool's own overhead. A server-side or unknown tool, or chat's
// web_search_options (a search the provider runs and bills), is refused.
func toolTokens(out map[string]json.RawMessage) (int64, *Refusal) {
	if raw, ok := out["web_search_options"]; ok && string(raw) != "null" {
		return 0, toolRefusal("web_search_options (a search the provider runs and bills as input)")
	}
	var n int64
	offered := false
	if raw, ok := out["functions"]; ok && string(raw) != "null" {
		var fns []json.RawMessage
		if json.Unmarshal(raw, &fns) != nil {
			return 0, bodyRefusal(`"functions" must be a list`)
		}
		offered = len(fns) > 0
	}
	if raw, ok := out["tools"]; ok && string(raw) != "null" {
		var tools []struct {
			Type *string `json:"type"`
		}
		if json.Unmarshal(raw, &tools) != nil {
			return 0, bodyRefusal(`"tools" must be a list of objects`)
		}
		for _, t := range tools {
			typ := ""
			if t.Type != nil {
				typ = *t.Type
			}
			extra, ok := toolKind(typ)
			if !ok {
				return 0, toolRefusal(fmt.Sprintf("the tool type %q (a server-side or unknown tool)", Clip(typ, 64)))
			}
			n += extra
			offered = true
		}
	}
	if offered {
		n += toolUseSystemPrompt
	}
	return n, nil
}

// toolKind finds a tool type in clientToolTokens: exactly, or as a prefix and
// a date (bash_20250124), the way Anthropic versions its built-in tools.
func toolKind(typ string) (int64, bool) {
	if v, ok := clientToolTokens[typ]; ok && !strings.HasSuffix(typ, "_") {
		return v, true
	}
	i := strings.LastIndexByte(typ, '_')
	if i < 0 || !isDate(typ[i+1:]) {
		return 0, false
	}
	v, ok := clientToolTokens[typ[:i+1]]
	return v, ok
}

// isDate reports whether s is eight digits (a tool version, 20250124).
func isDate(s string) bool {
	if len(s) != 8 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func toolRefusal(what string) *Refusal {
	return bodyRefusal("under a token budget " + what + " is not allowed: its cost is not bounded by the request")
}
