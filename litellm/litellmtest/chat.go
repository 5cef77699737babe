package litellmtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentsandbox/sandbox/internal/ctxsleep"
)

type chatBody struct {
	Model         string            `json:"model"`
	Messages      []json.RawMessage `json:"messages"`
	Stream        bool              `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	User            string         `json:"user"`
	Metadata        map[string]any `json:"metadata"`
	LitellmMetadata map[string]any `json:"litellm_metadata"`
}

// flatten reads one message; array content keeps the text parts.
func flatten(raw json.RawMessage) Message {
	var m struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(raw, &m)
	var text string
	if json.Unmarshal(m.Content, &text) != nil {
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		_ = json.Unmarshal(m.Content, &parts)
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		text = b.String()
	}
	return Message{Role: m.Role, Content: text}
}

// tokens is the fake's deterministic token count: a quarter of the bytes, rounded up.
func tokens(s string) int { return (len(s) + 3) / 4 }

// endUserOf applies LiteLLM's precedence for the customer id.
func endUserOf(h http.Header, b *chatBody) string {
	for _, name := range []string{"x-litellm-customer-id", "x-litellm-end-user-id"} {
		if v := h.Get(name); v != "" {
			return v
		}
	}
	if b.User != "" {
		return b.User
	}
	if u, ok := b.LitellmMetadata["user"].(string); ok && u != "" {
		return u
	}
	if u, ok := b.Metadata["user_id"].(string); ok {
		return u
	}
	return ""
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	var body chatBody
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil {
		writeProxyError(w, http.StatusBadRequest, "Invalid JSON payload: "+err.Error(), "invalid_request_error", "None")
		return
	}
	if body.Model == "" {
		writeProxyError(w, http.StatusBadRequest, "Invalid model name passed in model=None. Call `/v1/models` to view available models for your key.", "invalid_request_error", "model")
		return
	}
	m, ok := s.models[body.Model]
	if !ok {
		writeProxyError(w, http.StatusBadRequest, "Invalid model name passed in model="+body.Model+". Call `/v1/models` to view available models for your key.", "invalid_request_error", "model")
		return
	}
	req := ChatRequest{Model: body.Model, Stream: body.Stream, EndUser: endUserOf(r.Header, &body), Header: r.Header.Clone()}
	for _, raw := range body.Messages {
		req.Messages = append(req.Messages, flatten(raw))
	}
	reply := s.cfg.reply(req)
	prompt, completion := reply.PromptTokens, reply.CompletionTokens
	if prompt == 0 {
		for _, msg := range req.Messages {
			prompt += tokens(msg.Content) + 3
		}
	}
	if completion == 0 {
		completion = max(1, tokens(reply.Content))
	}
	if s.cfg.maxUsage {
		prompt, completion = maxUsage(raw)
	}
	spend := roundCost(cost(m, prompt, completion))

	slm := spendLogsMetadata(r, body.Metadata)
	keyHash := HashKey(presentedKey(r))
	id := "chatcmpl-" + newUUID()
	callID := newUUID()
	created := start.Unix()
	respModel := m.Upstream
	if _, after, ok := strings.Cut(respModel, "/"); ok {
		respModel = after
	}

	row := SpendRow{
		RequestID: id, LitellmCallID: callID, CallType: "acompletion", APIKey: keyHash,
		Spend: spend, PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
		StartTime: start, Model: m.Upstream, ModelID: m.ID, ModelGroup: m.Name, CustomLLMProvider: m.Provider,
		User: "default_user_id", EndUser: req.EndUser, SessionID: r.Header.Get("x-litellm-session-id"), Status: "success",
		Metadata: map[string]any{
			"spend_logs_metadata": slm, "user_api_key": keyHash, "user_api_key_alias": nil,
			"user_api_key_end_user_id": req.EndUser, "user_api_key_user_id": "default_user_id",
		},
	}

	hdr := w.Header()
	hdr.Set("x-litellm-call-id", callID)
	hdr.Set("x-litellm-model-id", m.ID)
	hdr.Set("x-litellm-model-group", m.Name)
	hdr.Set("x-litellm-version", s.cfg.version)
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

	if !body.Stream {
		hdr.Set("x-litellm-response-cost", strconv.FormatFloat(spend, 'g', -1, 64))
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "created": created, "model": respModel, "object": "chat.completion", "system_fingerprint": nil,
			"choices": []any{map[string]any{"finish_reason": "stop", "index": 0, "message": map[string]any{
				"content": reply.Content, "role": "assistant", "tool_calls": nil, "function_call": nil}}},
			"usage": usage,
		})
		row.EndTime = s.now()
		s.writeSpend(row)
		return
	}

	s.stream(w, r, body, reply, chatReply{id: id, created: created, model: respModel, usage: usage, row: row})
}

// chatReply is what a chat completion answers with, besides its content: the
// response's identity and usage, and the spend row written once it is sent.
type chatReply struct {
	id, model string
	created   int64
	usage     map[string]any
	row       SpendRow
}

// stream sends reply as server-sent events, as LiteLLM streams a completion: the
// content in chunks, a stop chunk, the usage when asked for, then [DONE]. A drop or
// an error set for the next stream (DropStreamAfter, ErrorStreamAfter) happens at its
// chunk.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, body chatBody, reply Reply, c chatReply) {
	hdr := w.Header()
	chunks := reply.Chunks
	if chunks == nil {
		chunks = splitChunks(reply.Content)
	}
	s.mu.Lock()
	dropAt, errAt := s.dropAt, s.errAt
	if dropAt >= 0 {
		s.dropAt = -1
	}
	if errAt >= 0 {
		s.errAt = -1
	}
	s.mu.Unlock()

	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := w.Write(append(append([]byte("data: "), b...), '\n', '\n')); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": c.id, "created": c.created, "model": c.model, "object": "chat.completion.chunk", "system_fingerprint": nil,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	for i, text := range chunks {
		if i == dropAt {
			// Abort the response: the client sees the connection cut mid-stream.
			panic(http.ErrAbortHandler)
		}
		if i == errAt {
			s.streamError(send, c.row)
			return
		}
		if !ctxsleep.Sleep(r.Context(), s.cfg.chunkDelay) {
			return
		}
		delta := map[string]any{"content": text}
		if i == 0 {
			delta["role"] = "assistant"
		}
		if !send(chunk(delta, nil)) {
			return
		}
	}
	if dropAt >= len(chunks) {
		panic(http.ErrAbortHandler)
	}
	if errAt >= len(chunks) {
		s.streamError(send, c.row)
		return
	}
	send(chunk(map[string]any{}, "stop"))
	if body.StreamOptions != nil && body.StreamOptions.IncludeUsage {
		send(map[string]any{"id": c.id, "created": c.created, "model": c.model, "object": "chat.completion.chunk",
			"system_fingerprint": nil, "choices": []any{}, "usage": c.usage})
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	if fl != nil {
		fl.Flush()
	}
	c.row.EndTime = s.now()
	s.writeSpend(c.row)
}

// streamError ends a stream the way LiteLLM does when the provider fails mid-stream:
// one error event, status still 200, and a failure row without spend.
func (s *Server) streamError(send func(any) bool, row SpendRow) {
	send(map[string]any{"error": map[string]any{
		"message": "litellm.InternalServerError: provider stream failed", "type": "internal_server_error",
		"param": "None", "code": "500"}})
	row.EndTime = s.now()
	row.Status, row.Spend, row.CompletionTokens = "failure", 0, 0
	row.TotalTokens = row.PromptTokens
	s.writeSpend(row)
}

// splitChunks splits after each space, so "a b c" streams as "a ", "b ", "c".
func splitChunks(s string) []string {
	if s == "" {
		return []string{""}
	}
	var out []string
	for s != "" {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// MaxUsageUncapped is the completion a call with no output cap is said to
// have used under WithMaxUsage: far more than any budget in a test.
const MaxUsageUncapped = 1 << 20

// maxUsage is the most a chat call could be billed, as WithMaxUsage reports it:
// one prompt token per body byte plus what providers bill for the body's tools
// (ToolOverhead), and every choice (n) at the smallest output cap the body
// names (max_tokens, max_completion_tokens), or MaxUsageUncapped.
func maxUsage(raw []byte) (prompt, completion int) {
	var b struct {
		N                   *float64 `json:"n"`
		MaxTokens           *float64 `json:"max_tokens"`
		MaxCompletionTokens *float64 `json:"max_completion_tokens"`
		Tools               []struct {
			Type string `json:"type"`
		} `json:"tools"`
		Functions []json.RawMessage `json:"functions"`
	}
	_ = json.Unmarshal(raw, &b)
	types := make([]string, len(b.Tools))
	for i, t := range b.Tools {
		types[i] = t.Type
	}
	defer func() { prompt += ToolOverhead(len(b.Functions) > 0, types...) }()
	choices := 1
	if b.N != nil && *b.N > 1 {
		choices = int(*b.N)
	}
	limit := MaxUsageUncapped
	for _, v := range []*float64{b.MaxTokens, b.MaxCompletionTokens} {
		if v != nil && *v > 0 && int(*v) < limit {
			limit = int(*v)
		}
	}
	return len(raw), choices * limit
}

// spendLogsMetadata is a call's spend_logs_metadata: the x-litellm-spend-logs-metadata
// header replaces the body's metadata value, and safe_json_loads drops a header that
// is not JSON, leaving the body's.
func spendLogsMetadata(r *http.Request, metadata map[string]any) any {
	var slm any
	if md, ok := metadata["spend_logs_metadata"]; ok {
		slm = md
	}
	if h := r.Header.Get("x-litellm-spend-logs-metadata"); h != "" {
		var v any
		if json.Unmarshal([]byte(h), &v) == nil {
			slm = v
		}
	}
	return slm
}

// ToolOverhead is what a provider bills for a call's tools beyond the bytes of
// their definitions, as WithMaxUsage bills it, from the providers' documentation
// (Anthropic, "Tool use with Claude" > Pricing and the built-in tools' pages): a
// tool-use system prompt of up to 530 tokens on any call with a tool (or a
// legacy function), plus 245 for the bash tool, 700 for the text editor and
// 735 + 499 (definition and system prompt) for computer use. types are the
// tools' "type" fields.
func ToolOverhead(functions bool, types ...string) int {
	if !functions && len(types) == 0 {
		return 0
	}
	n := 530
	for _, t := range types {
		switch {
		case strings.HasPrefix(t, "bash_"):
			n += 245
		case strings.HasPrefix(t, "text_editor_"):
			n += 700
		case strings.HasPrefix(t, "computer_"):
			n += 735 + 499
		}
	}
	return n
}
