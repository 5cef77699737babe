package sandboxtest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// testResponseHeaderAllowlist: from inside a real sandbox, the raw answers of a
// plain, a streamed and a failed call and of the model list hold none of the
// headers LiteLLM sends about the shared key (litellmtest.SharedKeyHeaders: its
// live rate limits, i.e. every tenant's use, and the provider's organisation and
// account limits it relays as llm_provider-*), read as the agent's HTTP client
// reads them, byte for byte.
func testResponseHeaderAllowlist(t *testing.T, h ProxyHarness) {
	u := newUpstream(t)
	spec := proxySpec(RunID("resphdr"), u)
	p, stop := started(t, h, spec)
	defer stop()
	ctype := [2]string{"Content-Type", "application/json"}
	reqs := []redTeamRequest{
		{Method: "POST", Path: "/v1/chat/completions", Headers: [][2]string{ctype}, Body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:rh1"}]}`},
		{Method: "POST", Path: "/v1/chat/completions", Headers: [][2]string{ctype}, Body: `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"MARKER:rh2"}]}`},
		{Method: "POST", Path: "/v1/chat/completions", Headers: [][2]string{ctype}, Body: `{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}`},
		{Method: "GET", Path: "/v1/models"},
	}
	ws := requestsWorkspace(t, reqs)
	res := h.sandbox(t, p, spec.RunID, ws, "rawdump", port.WorkspacePath+"/reqs.jsonl")
	got := 0
	for _, l := range lines0(res.Stdout) {
		var out struct {
			I   int    `json:"i"`
			Raw string `json:"raw"`
			Err string `json:"err"`
		}
		if err := json.Unmarshal([]byte(l), &out); err != nil {
			continue
		}
		got++
		head, _, _ := strings.Cut(out.Raw, "\r\n\r\n")
		if !strings.HasPrefix(head, "HTTP/1.1 ") {
			t.Errorf("request %d: no answer: %q %s", out.I, head, out.Err)
		}
		if strings.Contains(out.Raw, litellmtest.SharedKeyCanary) {
			t.Errorf("request %d: the shared key's headers reached the agent:\n%s", out.I, head)
		}
		for _, name := range []string{"x-ratelimit-", "llm_provider-", "x-litellm-key-"} {
			if strings.Contains(strings.ToLower(head), "\n"+name) {
				t.Errorf("request %d: a %s* header reached the agent:\n%s", out.I, name, head)
			}
		}
	}
	if got != len(reqs) {
		t.Errorf("the probe answered %d of %d requests: exit %d\n%s\n%s", got, len(reqs), res.ExitCode, res.Stdout, res.Stderr)
	}
}
