package proxypolicy

import (
	"net/http"
	"slices"
	"strings"
)

// Route is one inference route an LLM proxy forwards. The table (Routes) is the
// only way a request reaches the upstream: LiteLLM serves admin and cross-tenant
// APIs under /v1 too (/v1/mcp/server, /v1/agents, /v1/model/info, /v1/files,
// /v1/batches, /v1/fine_tuning/jobs, /v1/vector_stores, ...), and whatever the
// key given to a proxy may reach, an agent must not. The key should still be a
// LiteLLM virtual key limited to LLM routes, never the master key: the table is
// the second wall, not the only one.
type Route struct {
	// Method is the one method allowed on the route.
	Method string
	// Path is the upstream path, under /v1.
	Path string
	// SubPaths also allows paths below Path (GET /v1/models/{model}, where a
	// model name may hold slashes).
	SubPaths bool
	// BodyKeys is the allowlist of top-level JSON body keys; every other key is
	// removed before forwarding. Nil for routes without a body.
	BodyKeys []string
	// SetUser makes the proxy set the body's "user" to the run's billing account
	// (OpenAI-style routes; LiteLLM reads it as the end user when no header says).
	SetUser bool
	// SetLiteLLMUser makes the proxy set litellm_metadata to {"user": the
	// billing account}, for APIs without a "user" field (Anthropic's messages),
	// where LiteLLM looks for the end user there.
	SetLiteLLMUser bool
	// MaxOutputKeys are the body keys that cap the completion's tokens, in order
	// of precedence; the proxy reserves that many tokens of a token budget.
	MaxOutputKeys []string
}

// Body keys shared by the OpenAI-style generation routes.
var samplingKeys = []string{"model", "stream", "stream_options", "temperature", "top_p", "n", "stop",
	"presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "seed", "user"}

// routes is the allowlist. Body keys are those of the OpenAI and Anthropic APIs
// that shape a completion; what moves attribution, routing, storage or price
// (metadata, litellm_metadata, spend_logs_metadata, tags, api_key, api_base,
// base_url, extra_body, mock_response, store, service_tier, previous_response_id,
// safety_identifier, callbacks, ...) is absent on purpose.
var routes = []Route{
	{Method: http.MethodPost, Path: "/v1/chat/completions", SetUser: true,
		MaxOutputKeys: []string{"max_completion_tokens", "max_tokens"},
		BodyKeys: concat(samplingKeys, "messages", "max_tokens", "max_completion_tokens", "response_format",
			"tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "reasoning_effort",
			"modalities", "audio", "prediction", "web_search_options", "verbosity", "thinking")},
	{Method: http.MethodPost, Path: "/v1/completions", SetUser: true,
		MaxOutputKeys: []string{"max_tokens"},
		BodyKeys:      concat(samplingKeys, "prompt", "suffix", "max_tokens", "echo", "best_of")},
	{Method: http.MethodPost, Path: "/v1/embeddings", SetUser: true,
		BodyKeys: []string{"model", "input", "encoding_format", "dimensions", "user"}},
	{Method: http.MethodPost, Path: "/v1/responses", SetUser: true,
		MaxOutputKeys: []string{"max_output_tokens"},
		BodyKeys: []string{"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
			"max_output_tokens", "temperature", "top_p", "stream", "text", "reasoning", "truncation", "user"}},
	{Method: http.MethodPost, Path: "/v1/moderations",
		BodyKeys: []string{"model", "input"}},
	{Method: http.MethodPost, Path: "/v1/messages", SetLiteLLMUser: true,
		MaxOutputKeys: []string{"max_tokens"},
		BodyKeys: []string{"model", "messages", "system", "max_tokens", "stop_sequences", "stream",
			"temperature", "top_p", "top_k", "tools", "tool_choice", "thinking"}},
	{Method: http.MethodGet, Path: "/v1/models", SubPaths: true},
}

func concat(a []string, b ...string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// Routes returns the inference routes LLM proxies forward, for every front and
// for configuration renderers.
func Routes() []Route {
	out := make([]Route, len(routes))
	for i, r := range routes {
		r.BodyKeys = slices.Clone(r.BodyKeys)
		r.MaxOutputKeys = slices.Clone(r.MaxOutputKeys)
		out[i] = r
	}
	return out
}

// BareRoutePrefix is the prefix OpenAI SDKs leave out when their base URL has
// none: a route's path without it (/chat/completions) is the same route.
const BareRoutePrefix = "/v1"

// RouteFor finds the route of a clean path (CleanPath's rules are the caller's):
// the route, the upstream path (the bare form gains /v1), and whether the path is
// known under another method (so the answer is 405, not 404).
func RouteFor(method, p string) (r Route, upstream string, ok, otherMethod bool) {
	up := p
	if !strings.HasPrefix(p, BareRoutePrefix+"/") {
		up = BareRoutePrefix + p
	}
	for _, rt := range routes {
		if up != rt.Path && !(rt.SubPaths && strings.HasPrefix(up, rt.Path+"/") && len(up) > len(rt.Path)+1) {
			continue
		}
		if rt.Method == method || (method == http.MethodHead && rt.Method == http.MethodGet) {
			return rt, up, true, false
		}
		otherMethod = true
	}
	return Route{}, "", false, otherMethod
}

// RouteList is the allowlist as text ("POST /v1/chat/completions, ..."), for
// refusals that name it.
func RouteList() string {
	var b strings.Builder
	for i, r := range routes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.Method + " " + r.Path)
		if r.SubPaths {
			b.WriteString("[/...]")
		}
	}
	return b.String()
}

// KeyRoutes returns the routes the library's proxies forward upstream, in the form
// of LiteLLM's allowed_routes for a virtual key (litellm.KeyRequest.AllowedRoutes):
// exact paths, and "<path>/*" where a route allows sub-paths. A key limited to them
// can reach nothing the proxy would not forward anyway; LiteLLM's own group
// "llm_api_routes" is wider (it includes its MCP and agent routes).
func KeyRoutes() []string {
	var out []string
	for _, r := range routes {
		out = append(out, r.Path)
		if r.SubPaths {
			out = append(out, r.Path+"/*")
		}
	}
	return out
}
