package sandboxtest

import (
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// testResponseHeaderAllowlist: from inside a real sandbox, the raw answers of a
// plain, a streamed and a failed call and of the model list hold none of the
// headers LiteLLM sends about the shared key (litellmtest.SharedKeyHeaders: its
// live rate limits, i.e. every tenant's use, and the provider's organisation and
// account limits it relays as llm_provider-*), read as the agent's HTTP client
// reads them, byte for byte.
func testResponseHeaderAllowlist(t *testing.T, h ProxyHarness) {
	u := newUpstream(t)
	ctype := [2]string{"Content-Type", "application/json"}
	reqs := []redTeamRequest{
		{Method: "POST", Path: "/v1/chat/completions", Headers: [][2]string{ctype}, Body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:rh1"}]}`},
		{Method: "POST", Path: "/v1/chat/completions", Headers: [][2]string{ctype}, Body: `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"MARKER:rh2"}]}`},
		{Method: "POST", Path: "/v1/chat/completions", Headers: [][2]string{ctype}, Body: `{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}`},
		{Method: "GET", Path: "/v1/models"},
	}
	rawAnswers(t, h, u, "resphdr", reqs, func(out rawAnswer) {
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
	})
}
