package llmproxy

import (
	"encoding/json"
	"strings"
	"testing"
)

// Each tool kind reserves its documented overhead once the tool-use system
// prompt is counted; server-side and unknown kinds are refused.
func TestToolTokens(t *testing.T) {
	for body, want := range map[string]int64{
		`{}`:                              0,
		`{"tools":[]}`:                    0,
		`{"tools":null,"functions":null}`: 0,
		`{"tools":[{"type":"function"}]}`: toolUseSystemPrompt,
		`{"tools":[{"name":"f","input_schema":{}}]}`: toolUseSystemPrompt,
		`{"functions":[{"name":"f"}]}`:               toolUseSystemPrompt,
		`{"tools":[{"type":"custom","name":"f"}]}`:   toolUseSystemPrompt,
		`{"tools":[{"type":"bash_20250124"},{"type":"text_editor_20250728"},{"type":"computer_20251124"}]}`: toolUseSystemPrompt +
			bashToolTokens + textEditorToolTokens + computerToolTokens,
	} {
		var out map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		got, ref := toolTokens(out)
		if ref != nil || got != want {
			t.Errorf("%s: %d %+v, want %d", body, got, ref, want)
		}
	}
	for _, body := range []string{
		`{"tools":[{"type":"web_search_20250305"}]}`, `{"tools":[{"type":"web_fetch_20250910"}]}`,
		`{"tools":[{"type":"web_search"}]}`, `{"tools":[{"type":"web_search_preview"}]}`, `{"tools":[{"type":"mcp"}]}`,
		`{"tools":[{"type":"file_search"}]}`, `{"tools":[{"type":"code_interpreter"}]}`, `{"tools":[{"type":"image_generation"}]}`,
		`{"tools":[{"type":"computer_use_preview"}]}`, `{"tools":[{"type":"bash_"}]}`, `{"tools":[{"type":"bash_2025"}]}`,
		`{"tools":[{"type":"function"},{"type":"code_execution_20250825"}]}`, `{"web_search_options":{}}`,
		`{"tools":"x"}`, `{"functions":{}}`,
	} {
		var out map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		if _, ref := toolTokens(out); ref == nil || ref.Status != 400 || !strings.HasPrefix(ref.Message, "body_policy: ") {
			t.Errorf("%s: not refused: %+v", body, ref)
		}
	}
}
