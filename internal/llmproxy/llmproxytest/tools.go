package llmproxytest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// ToolKinds are the client-side tool kinds a token budget admits, one request
// body each (a chat call with max_tokens 1), as agents send them: OpenAI
// function tools and legacy functions, Anthropic custom tools, and the bash,
// text editor and computer use tools Anthropic defines (which LiteLLM passes
// through).
var ToolKinds = []struct{ Name, Body string }{
	{"function", `"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`},
	{"legacy_functions", `"functions":[{"name":"f","parameters":{"type":"object"}}]`},
	{"anthropic_custom", `"tools":[{"name":"f","input_schema":{"type":"object"}}]`},
	{"bash", `"tools":[{"type":"bash_20250124","name":"bash"}]`},
	{"text_editor", `"tools":[{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"}]`},
	{"computer_use", `"tools":[{"type":"computer_20250124","name":"computer","display_width_px":1024,"display_height_px":768}]`},
}

// ServerTools are requests with tools the provider runs and bills as input
// (search results, fetched pages, code output): no request field bounds them,
// so a token budget refuses them before they reach the upstream.
var ServerTools = []struct{ Name, Path, Body string }{
	{"anthropic_web_search", "/v1/messages", `{"model":"claude-haiku","max_tokens":8,"messages":[{"role":"user","content":"q"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`},
	{"anthropic_web_fetch", "/v1/messages", `{"model":"claude-haiku","max_tokens":8,"messages":[{"role":"user","content":"q"}],"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}`},
	{"anthropic_code_execution", "/v1/messages", `{"model":"claude-haiku","max_tokens":8,"messages":[{"role":"user","content":"q"}],"tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`},
	{"responses_web_search", "/v1/responses", `{"model":"gpt-4o-mini","input":"q","tools":[{"type":"web_search"}]}`},
	{"responses_file_search", "/v1/responses", `{"model":"gpt-4o-mini","input":"q","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`},
	{"responses_mcp", "/v1/responses", `{"model":"gpt-4o-mini","input":"q","tools":[{"type":"mcp","server_label":"x","server_url":"https://mcp.example"}]}`},
	{"chat_web_search_options", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"q"}],"web_search_options":{}}`},
	{"computer_use_preview", "/v1/responses", `{"model":"gpt-4o-mini","input":"q","tools":[{"type":"computer_use_preview","display_width":1,"display_height":1,"environment":"browser"}]}`},
}

// testMaxTokensWithTools: under a token budget, calls with tools stay within
// the stated bound although the upstream bills each tool kind's documented
// overhead (a tool-use system prompt, the built-in tools' definitions) on top
// of the body: many concurrent calls with one tiny tool each, per tool kind,
// are charged at most the budget plus one call's excess (its body bytes, its
// tools' overhead and its choices).
func testMaxTokensWithTools(t *testing.T, nf NewFront) {
	const budget = 20000
	for _, kind := range ToolKinds {
		t.Run(kind.Name, func(t *testing.T) {
			s := spec("run-tools-" + strings.ReplaceAll(kind.Name, "_", "-"))
			s.Budget.MaxTokens = budget
			e := newEnv(t, nf, s, litellmtest.WithMaxUsage())
			e.up.SetLatency(30 * time.Millisecond) // the calls overlap
			body := `{"model":"gpt-4o-mini","max_tokens":1,"messages":[{"role":"user","content":"hi"}],` + kind.Body + `}`
			total := burst(t, e, []string{body})
			var excess int
			for i, r := range e.up.Requests() {
				var b struct {
					Tools []struct {
						Type string `json:"type"`
					} `json:"tools"`
					Functions []json.RawMessage `json:"functions"`
				}
				if err := json.Unmarshal(r.Body, &b); err != nil {
					t.Fatalf("request %d body: %v", i, err)
				}
				if len(b.Tools)+len(b.Functions) != 1 {
					t.Fatalf("request %d lost its tool: %s", i, r.Body)
				}
				var types []string
				for _, tl := range b.Tools {
					types = append(types, tl.Type)
				}
				excess = max(excess, len(r.Body)+litellmtest.ToolOverhead(len(b.Functions) > 0, types...)+1)
			}
			t.Logf("%s: %d calls forwarded, %d tokens charged upstream on a budget of %d (one call's excess at most %d)", kind.Name, len(e.up.Requests()), total, budget, excess)
			if total > budget+excess {
				t.Errorf("the upstream charged %d tokens on a budget of %d: more than one call's excess (%d)", total, budget, excess)
			}
		})
	}
}

// testServerToolsRefused: under a token budget, a request with a server-side
// tool is refused (400, "body_policy: ...") and never reaches the upstream.
func testServerToolsRefused(t *testing.T, nf NewFront) {
	s := spec("run-server-tools")
	s.Budget.MaxTokens = 100000
	e := newEnv(t, nf, s, litellmtest.WithMaxUsage())
	for _, c := range ServerTools {
		r := Do(t, e.run, http.MethodPost, c.Path, c.Body, nil)
		if _, _, msg := r.APIError(); r.Status != http.StatusBadRequest || !strings.HasPrefix(msg, "body_policy: under a token budget") {
			t.Errorf("%s: %d %s", c.Name, r.Status, r.Body)
		}
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Errorf("%d requests with server-side tools reached the upstream", n)
	}
	// The same body without a budget is the operator's to allow: forwarded.
	free := newEnv(t, nf, spec("run-server-tools-free"))
	if r := Do(t, free.run, http.MethodPost, ServerTools[0].Path, ServerTools[0].Body, nil); r.Status != http.StatusOK {
		t.Errorf("without a budget: %d %s", r.Status, r.Body)
	}
}
