package port

import (
	"slices"
	"strings"
)

// SandboxHostname is every sandbox's host name (and its HOSTNAME variable).
const SandboxHostname = "sandbox"

// PlaceholderAPIKey is the API key variable an agent sees (OPENAI_API_KEY,
// ANTHROPIC_API_KEY). It is a fixed string, not a secret: SDKs refuse to start without
// a key, and the proxy drops whatever key a call carries and injects the real one.
const PlaceholderAPIKey = "sk-agentsandbox-placeholder-not-a-secret"

// LLMEnv returns the variables a run with LLM access gets, so an unmodified SDK talks
// to the in-sandbox bridge (BridgeAddr) and through it to the run's proxy:
//
//   - OPENAI_API_BASE=http://127.0.0.1:8080, the base without /v1 (the project's agent
//     contract: agents append /v1/...);
//   - OPENAI_BASE_URL=http://127.0.0.1:8080/v1, which the official OpenAI SDKs (Node,
//     Python 1.x, Go) read as the base that their paths (/chat/completions,
//     /embeddings, /responses, /models) are appended to;
//   - ANTHROPIC_BASE_URL=http://127.0.0.1:8080, which Anthropic's SDKs append
//     /v1/messages to (the proxy's route table allows /v1/messages);
//   - OPENAI_API_KEY and ANTHROPIC_API_KEY set to PlaceholderAPIKey.
func LLMEnv() map[string]string {
	base := "http://" + BridgeAddr
	return map[string]string{
		"OPENAI_API_BASE":    base,
		"OPENAI_BASE_URL":    base + "/v1",
		"OPENAI_API_KEY":     PlaceholderAPIKey,
		"ANTHROPIC_BASE_URL": base,
		"ANTHROPIC_API_KEY":  PlaceholderAPIKey,
	}
}

// LibraryEnv returns the variables the library itself sets in the sandbox of s:
// HOSTNAME always, LLMEnv when the run has LLM access, EgressEnv when it has
// egress. They win over the spec's Env (see SandboxEnv).
func (s RunSpec) LibraryEnv() map[string]string {
	env := map[string]string{"HOSTNAME": SandboxHostname}
	// LLM access: the variables SDKs read to find their API.
	if s.LLM != nil {
		for k, v := range LLMEnv() {
			env[k] = v
		}
	}
	// Egress: the proxy and CA variables, so the agent's own tools use its proxy.
	if s.LLM != nil && s.LLM.Egress {
		for k, v := range EgressEnv() {
			env[k] = v
		}
	}
	return env
}

// IsLibraryEnv says whether name is one of the variables the library sets itself
// (HOSTNAME, LLMEnv's, EgressEnv's), which a caller cannot override.
func IsLibraryEnv(name string) bool {
	if name == "HOSTNAME" {
		return true
	}
	if _, ok := LLMEnv()[name]; ok {
		return true
	}
	_, ok := EgressEnv()[name]
	return ok
}

// SandboxEnv is the environment a run sets over its image's, for every runner: the
// spec's Env, then LibraryEnv, whose variables replace any of the same name the
// caller set. One rule on every runtime: the library's own variables win, so a
// caller (or a request a caller passes on) cannot point an agent's SDK elsewhere.
func (s RunSpec) SandboxEnv() map[string]string {
	lib := s.LibraryEnv()
	env := make(map[string]string, len(s.Env)+len(lib))
	for k, v := range s.Env {
		env[k] = v
	}
	for k, v := range lib {
		env[k] = v
	}
	return env
}

// EnvList renders env as sorted KEY=value strings, so container configurations are
// deterministic.
func EnvList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// MergeEnv returns base (KEY=value strings, an image's environment say) with each
// variable of over replacing the one of the same name, or appended in over's order.
func MergeEnv(base, over []string) []string {
	out := append([]string(nil), base...)
	idx := make(map[string]int, len(out))
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = i
	}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}
