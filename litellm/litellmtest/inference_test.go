package litellmtest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInferenceRoutesAnswerLikeLiteLLM: each inference route besides chat answers
// in its API's shape, with LiteLLM's call headers and a spend row attributed to
// the end user the headers name.
func TestInferenceRoutesAnswerLikeLiteLLM(t *testing.T) {
	s := newServer(t)
	hdr := map[string]string{"x-litellm-end-user-id": "acct-1", "Content-Type": "application/json"}
	for _, c := range []struct {
		path, body, callType string
		check                func(t *testing.T, v map[string]any)
	}{
		{"/v1/completions", `{"model":"gpt-4o-mini","prompt":"MARKER:c1 x"}`, "atext_completion", func(t *testing.T, v map[string]any) {
			assert.Equal(t, "text_completion", v["object"])
			assert.Equal(t, "ECHO:c1", v["choices"].([]any)[0].(map[string]any)["text"])
			assert.True(t, strings.HasPrefix(v["id"].(string), "cmpl-"))
		}},
		{"/v1/embeddings", `{"model":"gpt-4o-mini","input":["a","bb"]}`, "aembedding", func(t *testing.T, v map[string]any) {
			assert.Equal(t, "list", v["object"])
			require.Len(t, v["data"], 2)
			e := v["data"].([]any)[1].(map[string]any)
			assert.Equal(t, "embedding", e["object"])
			assert.EqualValues(t, 1, e["index"])
			assert.Len(t, e["embedding"], 8)
			assert.EqualValues(t, 2, v["usage"].(map[string]any)["prompt_tokens"])
		}},
		{"/v1/responses", `{"model":"gpt-4o-mini","input":"MARKER:r1"}`, "aresponses", func(t *testing.T, v map[string]any) {
			assert.Equal(t, "response", v["object"])
			assert.Equal(t, "completed", v["status"])
			out := v["output"].([]any)[0].(map[string]any)
			assert.Equal(t, "ECHO:r1", out["content"].([]any)[0].(map[string]any)["text"])
			u := v["usage"].(map[string]any)
			assert.Equal(t, u["total_tokens"], u["input_tokens"].(float64)+u["output_tokens"].(float64))
		}},
		{"/v1/messages", `{"model":"claude-haiku","max_tokens":9,"messages":[{"role":"user","content":"MARKER:a1"}]}`, "anthropic_messages", func(t *testing.T, v map[string]any) {
			assert.Equal(t, "message", v["type"])
			assert.Equal(t, "end_turn", v["stop_reason"])
			assert.Equal(t, "ECHO:a1", v["content"].([]any)[0].(map[string]any)["text"])
			assert.Contains(t, v["usage"], "input_tokens")
		}},
	} {
		resp, body := do(t, s, http.MethodPost, c.path, hdr, c.body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", c.path, body)
		assert.NotEmpty(t, resp.Header.Get("x-litellm-call-id"), c.path)
		assert.NotEmpty(t, resp.Header.Get("x-litellm-response-cost"), c.path)
		var v map[string]any
		require.NoError(t, json.Unmarshal(body, &v), c.path)
		c.check(t, v)
		rows := s.SpendRows()
		require.NotEmpty(t, rows)
		var row = rows[0]
		for _, r := range rows {
			if r.LitellmCallID == resp.Header.Get("x-litellm-call-id") {
				row = r
			}
		}
		assert.Equal(t, c.callType, row.CallType, c.path)
		assert.Equal(t, "acct-1", row.EndUser, c.path)
	}
	resp, body := do(t, s, http.MethodPost, "/v1/moderations", hdr, `{"input":"hi"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), `"flagged":false`)
	resp, body = do(t, s, http.MethodGet, "/v1/models/claude-haiku", nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), `"owned_by":"anthropic"`)
	resp, _ = do(t, s, http.MethodPost, "/v1/embeddings", hdr, `{"model":"nope","input":"a"}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestInferenceRoutesStream: the streamed forms end the way their APIs end.
func TestInferenceRoutesStream(t *testing.T) {
	s := newServer(t)
	for path, c := range map[string]struct{ body, first, last string }{
		"/v1/completions": {`{"model":"gpt-4o-mini","prompt":"MARKER:x","stream":true}`, `data: {`, "data: [DONE]"},
		"/v1/responses":   {`{"model":"gpt-4o-mini","input":"MARKER:x","stream":true}`, "event: response.created", "event: response.completed"},
		"/v1/messages":    {`{"model":"claude-haiku","max_tokens":5,"messages":[{"role":"user","content":"x"}],"stream":true}`, "event: message_start", "event: message_stop"},
	} {
		resp, body := do(t, s, http.MethodPost, path, map[string]string{"Content-Type": "application/json"}, c.body)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"), path)
		assert.True(t, strings.HasPrefix(string(body), c.first), "%s starts %q", path, body)
		assert.Contains(t, string(body), c.last, path)
	}
}
