package llmproxy

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strconv"

	"github.com/agentsandbox/sandbox/proxyconf"
)

// The body policy of the inference routes (proxyconf.Route.BodyKeys).
//
// LiteLLM takes attribution, routing and logging from request bodies: "user",
// "metadata" (user_id, tags, spend_logs_metadata, trace and session ids),
// "litellm_metadata", "tags", "safety_identifier", "api_key", "api_base",
// "base_url", "mock_response", "extra_body" and callback settings; which of them
// wins over our headers has changed between versions, and its own ban list
// (is_request_body_safe) has been bypassed before. So the engine parses every
// body of a route with a body policy and forwards only the allowlisted top-level
// keys, re-encoded (a duplicate key cannot mean one thing here and another
// upstream). Keys off the list, nested metadata included, are dropped rather
// than refused: SDKs add harmless fields faster than any list can follow, and a
// dropped field can neither bill nor route (target_model_names, for one, picks
// the model in LiteLLM 1.80).
//
// The run's billing account is written into the body too: "user" on
// OpenAI-style routes, litellm_metadata.user on /v1/messages (whose API has no
// "user"). LiteLLM up to at least 1.80.9 takes the end user from the body
// ("user", then litellm_metadata.user, then metadata.user_id) unless a user
// header is configured; only later versions read x-litellm-end-user-id first.
// With the same account in the header and the body, attribution no longer
// depends on that order. Its body check (is_request_body_safe) bans only
// api_base and base_url there, and lets them through when the body also has
// api_key; the allowlist removes all three. So the minimum LiteLLM version is set
// by the headers alone: one that stores x-litellm-spend-logs-metadata in the
// spend row for every route (1.75, the version litellmtest emulates, does).
//
// A body that is not one JSON object is refused (body_not_json). A streamed chat
// or text completion gets stream_options.include_usage, so its usage reaches the
// token budget and the audit.

// bodyRefusal refuses a body that is not a JSON object.
func bodyRefusal(msg string) *Refusal {
	return &Refusal{Status: http.StatusBadRequest, Blocked: "body_not_json", Type: "invalid_request_error", Message: "body_policy: " + msg}
}

// parsedBody is what the engine learnt from a body it rewrote.
type parsedBody struct {
	body    []byte
	model   string
	maxOut  int64 // the completion cap the request names, 0 if none
	dropped []string
}

// applyBodyPolicy checks and rewrites a request body for rt. account is the
// run's billing account.
func applyBodyPolicy(rt proxyconf.Route, contentType string, body []byte, account string) (parsedBody, *Refusal) {
	if ct := contentType; ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return parsedBody{}, bodyRefusal("the request body must be JSON (Content-Type application/json)")
		}
	}
	var in map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&in); err != nil || in == nil {
		return parsedBody{}, bodyRefusal("the request body must be one JSON object")
	}
	if dec.More() {
		return parsedBody{}, bodyRefusal("the request body must be one JSON object, with nothing after it")
	}
	out := make(map[string]json.RawMessage, len(in))
	var p parsedBody
	for k, v := range in {
		if slices.Contains(rt.BodyKeys, k) {
			out[k] = v
		} else {
			p.dropped = append(p.dropped, Clip(k, 64))
		}
	}
	if rt.SetUser {
		out["user"], _ = json.Marshal(account)
	}
	if rt.SetLiteLLMUser {
		out["litellm_metadata"], _ = json.Marshal(map[string]string{"user": account})
	}
	var stream bool
	if raw, ok := out["stream"]; ok && json.Unmarshal(raw, &stream) == nil && stream && slices.Contains(rt.BodyKeys, "stream_options") {
		out["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	}
	if raw, ok := out["model"]; ok {
		_ = json.Unmarshal(raw, &p.model)
		p.model = Clip(p.model, 256)
	}
	for _, k := range rt.MaxOutputKeys {
		if raw, ok := out[k]; ok {
			if n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64); err == nil && n > 0 {
				p.maxOut = n
				break
			}
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return parsedBody{}, bodyRefusal("the request body could not be re-encoded")
	}
	p.body = b
	slices.Sort(p.dropped)
	return p, nil
}
