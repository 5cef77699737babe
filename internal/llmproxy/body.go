package llmproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agentsandbox/sandbox/proxypolicy"
)

// The body policy of the inference routes (proxypolicy.Route.BodyKeys).
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

	out  map[string]json.RawMessage // the forwarded keys, for setCap
	need tokenNeed
}

// MaxChoices is the most completions (n, best_of) one call may ask for under a
// token budget; OpenAI's own limit is 128.
const MaxChoices = 128

// capBytes bounds what setCap adds to a body per cap key.
const capBytes = 48

// tokenNeed is what a call may cost at most, as far as its body tells: the
// token budget reserves it before forwarding.
type tokenNeed struct {
	// prompt bounds the input tokens: every token of text is at least one byte
	// of the body (a chat template's per-message tokens are fewer than the JSON
	// that frames the message), and a prediction's rejected tokens are billed
	// as output, so its bytes count twice.
	prompt int64
	// choices multiplies the output cap: n and best_of completions are each
	// billed up to the cap.
	choices int64
	// output says the route generates tokens (MaxOutputKeys), so the call gets
	// an output cap.
	output bool
	// media says the body refers to inputs whose tokens its bytes do not bound
	// (an image, audio, a file, by URL or id): the call reserves whatever is
	// left of the budget.
	media bool
}

// mediaKeys are body keys and content-part types whose token cost is not
// bounded by their bytes (an image_url of 40 bytes may cost a thousand tokens).
var mediaKeys = map[string]bool{
	"image_url": true, "image": true, "input_image": true, "input_audio": true, "audio": true,
	"input_file": true, "file": true, "file_id": true, "file_url": true, "file_data": true,
	"document": true, "video": true, "video_url": true,
}

// hasMedia walks a decoded body for mediaKeys as keys or as string values (a
// content part's "type"), whatever the JSON escapes used to spell them.
func hasMedia(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if mediaKeys[k] || hasMedia(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasMedia(e) {
				return true
			}
		}
	case string:
		return mediaKeys[x]
	}
	return false
}

// intValue reads a JSON number (any spelling: 3, 3.0, 3e0) or a string holding
// one, as LiteLLM's Python side would coerce it; ok is false for anything else
// or a non-integer.
func intValue(raw json.RawMessage) (n int64, ok bool) {
	var f float64
	if json.Unmarshal(raw, &f) != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(s), 64); err != nil {
			return 0, false
		}
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) || f > math.MaxInt32 || f < math.MinInt32 {
		return 0, false
	}
	return int64(f), true
}

// measure fills p.need for a token budget: it refuses choices it cannot read
// or over MaxChoices, and looks for inputs their bytes do not bound.
func (p *parsedBody) measure(rt proxypolicy.Route) *Refusal {
	// The body grows by the caps setCap writes (a key and up to 19 digits each).
	p.need = tokenNeed{prompt: int64(len(p.body) + capBytes*len(rt.MaxOutputKeys)), choices: 1, output: len(rt.MaxOutputKeys) > 0}
	if raw, ok := p.out["prediction"]; ok {
		p.need.prompt += int64(len(raw))
	}
	tools, ref := toolTokens(p.out)
	if ref != nil {
		return ref
	}
	p.need.prompt += tools
	for _, k := range []string{"n", "best_of"} {
		raw, ok := p.out[k]
		if !ok || string(raw) == "null" {
			continue
		}
		n, ok := intValue(raw)
		if !ok || n < 1 || n > MaxChoices {
			return bodyRefusal(fmt.Sprintf("under a token budget %q must be an integer from 1 to %d", k, MaxChoices))
		}
		p.out[k], _ = json.Marshal(n) // forwarded as read here
		p.need.choices = max(p.need.choices, n)
	}
	var all any
	if json.Unmarshal(p.body, &all) == nil {
		p.need.media = hasMedia(all)
	}
	return nil
}

// setCap writes the output cap into every cap key of rt the body has, or into
// the route's usual one when it has none, so that whichever the upstream reads
// is the cap the budget reserved; and re-encodes the body.
func (p *parsedBody) setCap(rt proxypolicy.Route, limit int64) *Refusal {
	v, _ := json.Marshal(limit)
	set := false
	for _, k := range rt.MaxOutputKeys {
		if _, ok := p.out[k]; ok {
			p.out[k], set = v, true
		}
	}
	if !set {
		k := rt.MaxOutputKeys[len(rt.MaxOutputKeys)-1] // max_tokens where a route has both
		p.out[k] = v
	}
	b, err := json.Marshal(p.out)
	if err != nil {
		return bodyRefusal("the request body could not be re-encoded")
	}
	p.body = b
	return nil
}

// applyBodyPolicy checks and rewrites a request body for rt. account is the
// run's billing account.
func applyBodyPolicy(rt proxypolicy.Route, contentType string, body []byte, account string) (parsedBody, *Refusal) {
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
	// The smallest cap the body names: the upstream may read any of them.
	for _, k := range rt.MaxOutputKeys {
		if raw, ok := out[k]; ok {
			if n, ok := intValue(raw); ok && n > 0 && (p.maxOut == 0 || n < p.maxOut) {
				p.maxOut = n
			}
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return parsedBody{}, bodyRefusal("the request body could not be re-encoded")
	}
	p.body, p.out = b, out
	slices.Sort(p.dropped)
	return p, nil
}
