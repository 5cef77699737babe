package proxypolicy

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

func validSpec() port.ProxySpec {
	return port.ProxySpec{
		RunID: "run-1", Attempt: 2, Upstream: "http://127.0.0.1:4000", APIKey: "sk-master-123",
		Attribution: port.Attribution{BillingAccountID: "acct-9", UserID: "u1", GraphID: "sandbox:agent", SessionID: "s1"},
	}
}

func TestPolicyApplyStripsAndInjects(t *testing.T) {
	p, err := NewPolicy(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("authorization", "Bearer stolen")
	h.Set("X-LiteLLM-End-User-Id", "victim")
	h.Set("x-litellm-spend-logs-metadata", `{"run_id":"other"}`)
	h.Set("x-litellm-customer-id", "victim")
	h.Set("X-Api-Key", "other-key")
	h.Set("Content-Type", "application/json")
	p.Apply(h)
	if got := h.Get("Authorization"); got != "Bearer sk-master-123" {
		t.Errorf("Authorization = %q", got)
	}
	if got := h.Get("X-Litellm-End-User-Id"); got != "acct-9" {
		t.Errorf("end user = %q", got)
	}
	if h.Get("X-Litellm-Customer-Id") != "" || h.Get("X-Api-Key") != "" {
		t.Errorf("spoofed headers survived: %v", h)
	}
	if h.Get("Content-Type") != "application/json" {
		t.Errorf("unrelated header lost")
	}
	var md SpendLogsMetadata
	if err := json.Unmarshal([]byte(h.Get("X-Litellm-Spend-Logs-Metadata")), &md); err != nil {
		t.Fatal(err)
	}
	want := SpendLogsMetadata{RunID: "run-1", Attempt: 2, UserID: "u1", GraphID: "sandbox:agent", SessionID: "s1"}
	if md != want {
		t.Errorf("metadata = %+v, want %+v", md, want)
	}
}

func TestPolicyRejectsBadInput(t *testing.T) {
	cases := map[string]func(*port.ProxySpec){
		"run id with slash":  func(s *port.ProxySpec) { s.RunID = "../etc" },
		"empty key":          func(s *port.ProxySpec) { s.APIKey = "" },
		"key with quote":     func(s *port.ProxySpec) { s.APIKey = `sk"; return 200` },
		"key with newline":   func(s *port.ProxySpec) { s.APIKey = "sk\nX: y" },
		"account with CRLF":  func(s *port.ProxySpec) { s.Attribution.BillingAccountID = "a\r\nX-Evil: 1" },
		"missing account":    func(s *port.ProxySpec) { s.Attribution.BillingAccountID = "" },
		"non-ascii session":  func(s *port.ProxySpec) { s.Attribution.SessionID = "sé" },
		"oversized trace id": func(s *port.ProxySpec) { s.Attribution.ExistingTraceID = string(make([]byte, 300)) },
		"negative attempt":   func(s *port.ProxySpec) { s.Attempt = -1 },
		"NUL in user id":     func(s *port.ProxySpec) { s.Attribution.UserID = "a\x00b" },
	}
	for name, mut := range cases {
		t.Run(name, func(t *testing.T) {
			s := validSpec()
			mut(&s)
			_, err := NewPolicy(s)
			if !errors.Is(err, port.ErrInvalidSpec) {
				t.Fatalf("err = %v, want ErrInvalidSpec", err)
			}
		})
	}
}

func TestIsStripped(t *testing.T) {
	for name, want := range map[string]bool{
		"authorization": true, "x-litellm-anything": true, "X-LITELLM-TAGS": true, "x-goog-api-key": true,
		"content-type": false, "accept": false, "x-litellmfoo": false,
	} {
		if got := IsStripped(name); got != want {
			t.Errorf("IsStripped(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestResponseHeaderPolicy: the response headers are an allowlist: the shared
// key's rate limits (LiteLLM's x-ratelimit-*, Anthropic's), the provider's headers
// LiteLLM relays (llm_provider-*), its headers about the key and the deployment,
// and any header nobody named yet are withheld, in every spelling.
func TestResponseHeaderPolicy(t *testing.T) {
	for name, allowed := range map[string]bool{
		"x-litellm-call-id": true, "X-Litellm-Response-Cost": true, "x-litellm-model-id": true, "X-LITELLM-MODEL-GROUP": true,
		"content-type": true, "Content-Length": true, "content-encoding": true, "retry-after": true, "Retry-After-Ms": true,
		"x-litellm-key-spend": false, "x-litellm-model-api-base": false, "llm_provider-openai-organization": false,
		"x-ratelimit-remaining-requests": false, "X-Ratelimit-Limit-Tokens": false, "x-ratelimit-reset-tokens": false,
		"anthropic-ratelimit-tokens-remaining": false, "llm_provider-x-ratelimit-remaining-tokens": false,
		"openai-organization": false, "x-litellm-version": false, "set-cookie": false, "link": false,
		"x-next-thing-an-upstream-adds": false, "": false, "Trailer": false, "Content-Type ": false,
	} {
		if got := IsResponseHeaderAllowed(name); got != allowed {
			t.Errorf("IsResponseHeaderAllowed(%q) = %v, want %v", name, got, allowed)
		}
		if IsResponseHeaderHidden(name) == IsResponseHeaderAllowed(name) {
			t.Errorf("%q is both hidden and allowed, or neither", name)
		}
	}
	list := ResponseHeaders()
	list[0] = "X-Changed"
	if IsResponseHeaderAllowed("X-Changed") || ResponseHeaders()[0] == "X-Changed" {
		t.Error("ResponseHeaders returns the table itself")
	}
}

// TestApplyIsAnAllowlist: headers LiteLLM reads as credentials, attribution,
// session or trace ids, or passes on to providers never survive Apply, whatever
// their spelling; only the allowlist and the injected headers do.
func TestApplyIsAnAllowlist(t *testing.T) {
	p, err := NewPolicy(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for _, name := range []string{
		"X_litellm_end_user_id", "x_litellm_customer_id", "Openai-Organization", "Openai-Project",
		"Anthropic-Api-Key", "X-Pass-Authorization", "X-Pass-Anything", "X-Litellm-Session-Id",
		"X-Agent-Session-Id", "Langfuse-Trace-Id", "X-Stainless-Lang", "Api-Key", "X-Real-Ip",
		"X-Forwarded-For", "Cookie", "Idempotency-Key", "Content-Type", "Accept", "User-Agent",
		"OpenAI-Beta", "Anthropic-Version", "Anthropic-Beta",
	} {
		h.Set(name, "v")
	}
	p.Apply(h)
	want := map[string]bool{"Authorization": true, "X-Litellm-End-User-Id": true, "X-Litellm-Spend-Logs-Metadata": true}
	for _, n := range AllowedRequestHeaders() {
		want[n] = true
	}
	for name := range h {
		if !want[name] {
			t.Errorf("%s survived Apply", name)
		}
	}
	for name := range want {
		if h.Get(name) == "" {
			t.Errorf("%s is missing after Apply", name)
		}
	}
}
