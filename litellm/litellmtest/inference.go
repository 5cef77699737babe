package litellmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentsandbox/sandbox/internal/ctxsleep"
)

// The inference routes besides chat completions, answered the way LiteLLM answers
// them (OpenAI shapes for completions, embeddings, responses and moderations; the
// Anthropic shape for /v1/messages), each writing a spend row like a chat call.

// inferenceBody is what the fake reads of any inference request.
type inferenceBody struct {
	Model           string            `json:"model"`
	Stream          bool              `json:"stream"`
	Prompt          json.RawMessage   `json:"prompt"`
	Input           json.RawMessage   `json:"input"`
	Messages        []json.RawMessage `json:"messages"`
	User            string            `json:"user"`
	Metadata        map[string]any    `json:"metadata"`
	LitellmMetadata map[string]any    `json:"litellm_metadata"`
}

// text is the request's prompt text, for the fake's token counts and replies.
func (b *inferenceBody) text() string {
	var parts []string
	for _, raw := range []json.RawMessage{b.Prompt, b.Input} {
		var s string
		var ss []string
		switch {
		case len(raw) == 0:
		case json.Unmarshal(raw, &s) == nil:
			parts = append(parts, s)
		case json.Unmarshal(raw, &ss) == nil:
			parts = append(parts, ss...)
		default:
			parts = append(parts, string(raw))
		}
	}
	for _, m := range b.Messages {
		parts = append(parts, flatten(m).Content)
	}
	return strings.Join(parts, " ")
}

// inference is the start of every such call: body, model, attribution and the
// spend row to complete. ok is false once an error was written.
func (s *Server) inference(w http.ResponseWriter, r *http.Request, callType, idPrefix string) (b inferenceBody, m Model, row SpendRow, ok bool) {
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		writeProxyError(w, http.StatusBadRequest, "Invalid JSON payload: "+err.Error(), "invalid_request_error", "None")
		return b, m, row, false
	}
	m, ok = s.models[b.Model]
	if !ok {
		writeProxyError(w, http.StatusBadRequest, "Invalid model name passed in model="+b.Model+". Call `/v1/models` to view available models for your key.", "invalid_request_error", "model")
		return b, m, row, false
	}
	endUser := endUserOf(r.Header, &chatBody{User: b.User, Metadata: b.Metadata, LitellmMetadata: b.LitellmMetadata})
	slm := spendLogsMetadata(r, b.Metadata)
	keyHash := HashKey(presentedKey(r))
	row = SpendRow{
		RequestID: idPrefix + newUUID(), LitellmCallID: newUUID(), CallType: callType, APIKey: keyHash,
		StartTime: s.now(), Model: m.Upstream, ModelID: m.ID, ModelGroup: m.Name, CustomLLMProvider: m.Provider,
		User: "default_user_id", EndUser: endUser, SessionID: r.Header.Get("x-litellm-session-id"), Status: "success",
		Metadata: map[string]any{
			"spend_logs_metadata": slm, "user_api_key": keyHash, "user_api_key_alias": nil,
			"user_api_key_end_user_id": endUser, "user_api_key_user_id": "default_user_id",
		},
	}
	hdr := w.Header()
	hdr.Set("x-litellm-call-id", row.LitellmCallID)
	hdr.Set("x-litellm-model-id", m.ID)
	hdr.Set("x-litellm-model-group", m.Name)
	hdr.Set("x-litellm-version", s.cfg.version)
	return b, m, row, true
}

// charge completes row with the call's tokens and cost and sets the cost header
// (for answers that are not streamed).
func (s *Server) charge(w http.ResponseWriter, m Model, row *SpendRow, prompt, completion int) {
	account(m, row, prompt, completion)
	w.Header().Set("x-litellm-response-cost", strconv.FormatFloat(row.Spend, 'g', -1, 64))
}

// account completes row with the call's tokens and cost.
func account(m Model, row *SpendRow, prompt, completion int) {
	row.PromptTokens, row.CompletionTokens, row.TotalTokens = prompt, completion, prompt+completion
	row.Spend = roundCost(cost(m, prompt, completion))
}

func (s *Server) finishRow(row SpendRow) {
	row.EndTime = s.now()
	s.writeSpend(row)
}

// answer is the scripted reply to a non-chat request, with the token counts of its
// prompt and of the reply (at least one).
func (s *Server) answer(b *inferenceBody, h http.Header) (reply string, in, out int) {
	text := b.text()
	reply = s.cfg.reply(ChatRequest{Model: b.Model, Messages: []Message{{Role: "user", Content: text}}, Header: h}).Content
	return reply, tokens(text), max(1, tokens(reply))
}

// chunks calls emit with each streamed piece of reply, after the configured delay;
// false means the client went away and the call ends without a spend row.
func (s *Server) chunks(r *http.Request, reply string, emit func(c string)) bool {
	for _, c := range splitChunks(reply) {
		if !ctxsleep.Sleep(r.Context(), s.cfg.chunkDelay) {
			return false
		}
		emit(c)
	}
	return true
}

// sseWriter writes server-sent events, flushing each.
type sseWriter struct {
	w  http.ResponseWriter
	fl http.Flusher
}

func startSSE(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return &sseWriter{w: w, fl: fl}
}

// event writes one event; name may be empty (OpenAI's data-only events).
func (e *sseWriter) event(name string, v any) {
	b, _ := json.Marshal(v)
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", b)
	if e.fl != nil {
		e.fl.Flush()
	}
}

func (e *sseWriter) done() {
	_, _ = e.w.Write([]byte("data: [DONE]\n\n"))
	if e.fl != nil {
		e.fl.Flush()
	}
}

// completions serves the legacy text completion route.
func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	b, m, row, ok := s.inference(w, r, "atext_completion", "cmpl-")
	if !ok {
		return
	}
	reply, prompt, completion := s.answer(&b, r.Header)
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
	created := row.StartTime.Unix()
	obj := func(text string, finish any) map[string]any {
		return map[string]any{"id": row.RequestID, "object": "text_completion", "created": created, "model": m.Name,
			"choices": []any{map[string]any{"text": text, "index": 0, "logprobs": nil, "finish_reason": finish}}}
	}
	if !b.Stream {
		s.charge(w, m, &row, prompt, completion)
		out := obj(reply, "stop")
		out["usage"] = usage
		writeJSON(w, http.StatusOK, out)
		s.finishRow(row)
		return
	}
	account(m, &row, prompt, completion)
	e := startSSE(w)
	if !s.chunks(r, reply, func(c string) { e.event("", obj(c, nil)) }) {
		return
	}
	last := obj("", "stop")
	last["usage"] = usage
	e.event("", last)
	e.done()
	s.finishRow(row)
}

// embeddings serves /v1/embeddings: one 8-dimensional vector per input.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	b, m, row, ok := s.inference(w, r, "aembedding", "embd-")
	if !ok {
		return
	}
	var inputs []string
	var one string
	if json.Unmarshal(b.Input, &one) == nil {
		inputs = []string{one}
	} else if json.Unmarshal(b.Input, &inputs) != nil || len(inputs) == 0 {
		writeProxyError(w, http.StatusBadRequest, "litellm.BadRequestError: input must be a string or a list of strings", "invalid_request_error", "input")
		return
	}
	data := make([]any, len(inputs))
	prompt := 0
	for i, in := range inputs {
		vec := make([]float64, 8)
		for j := range vec {
			vec[j] = float64((len(in)+j)%7) / 7
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": vec}
		prompt += tokens(in)
	}
	s.charge(w, m, &row, prompt, 0)
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": m.Name,
		"usage": map[string]any{"prompt_tokens": prompt, "total_tokens": prompt}})
	s.finishRow(row)
}

// responses serves OpenAI's Responses API (/v1/responses).
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	b, m, row, ok := s.inference(w, r, "aresponses", "resp_")
	if !ok {
		return
	}
	reply, in, out := s.answer(&b, r.Header)
	usage := map[string]any{"input_tokens": in, "output_tokens": out, "total_tokens": in + out,
		"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	msgID := "msg_" + newUUID()
	resp := func(status string, text string, usage any) map[string]any {
		var output []any
		if status == "completed" {
			output = []any{map[string]any{"type": "message", "id": msgID, "status": "completed", "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}}
		}
		return map[string]any{"id": row.RequestID, "object": "response", "created_at": row.StartTime.Unix(), "status": status,
			"model": m.Name, "output": output, "usage": usage}
	}
	if !b.Stream {
		s.charge(w, m, &row, in, out)
		writeJSON(w, http.StatusOK, resp("completed", reply, usage))
		s.finishRow(row)
		return
	}
	account(m, &row, in, out)
	e := startSSE(w)
	seq := 0
	ev := func(typ string, v map[string]any) {
		v["type"], v["sequence_number"] = typ, seq
		seq++
		e.event(typ, v)
	}
	ev("response.created", map[string]any{"response": resp("in_progress", "", nil)})
	if !s.chunks(r, reply, func(c string) {
		ev("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "delta": c})
	}) {
		return
	}
	ev("response.completed", map[string]any{"response": resp("completed", reply, usage)})
	s.finishRow(row)
}

// moderations serves /v1/moderations.
func (s *Server) moderations(w http.ResponseWriter, r *http.Request) {
	var b inferenceBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || len(b.Input) == 0 {
		writeProxyError(w, http.StatusBadRequest, "Invalid JSON payload: input is required", "invalid_request_error", "input")
		return
	}
	model := b.Model
	if model == "" {
		model = "omni-moderation-latest"
	}
	cats, scores := map[string]any{}, map[string]any{}
	for _, c := range []string{"harassment", "hate", "self-harm", "sexual", "violence"} {
		cats[c], scores[c] = false, 0.0001
	}
	w.Header().Set("x-litellm-call-id", newUUID())
	writeJSON(w, http.StatusOK, map[string]any{"id": "modr-" + newUUID(), "model": model,
		"results": []any{map[string]any{"flagged": false, "categories": cats, "category_scores": scores}}})
}

// messages serves Anthropic's Messages API as LiteLLM does at /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	b, m, row, ok := s.inference(w, r, "anthropic_messages", "msg_")
	if !ok {
		return
	}
	reply, in, out := s.answer(&b, r.Header)
	msg := func(content []any, stop any, usage map[string]any) map[string]any {
		return map[string]any{"id": row.RequestID, "type": "message", "role": "assistant", "model": m.Name,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage}
	}
	if !b.Stream {
		s.charge(w, m, &row, in, out)
		writeJSON(w, http.StatusOK, msg([]any{map[string]any{"type": "text", "text": reply}}, "end_turn",
			map[string]any{"input_tokens": in, "output_tokens": out}))
		s.finishRow(row)
		return
	}
	account(m, &row, in, out)
	e := startSSE(w)
	e.event("message_start", map[string]any{"type": "message_start", "message": msg([]any{}, nil, map[string]any{"input_tokens": in, "output_tokens": 1})})
	e.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	if !s.chunks(r, reply, func(c string) {
		e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": c}})
	}) {
		return
	}
	e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	e.event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": out}})
	e.event("message_stop", map[string]any{"type": "message_stop"})
	s.finishRow(row)
}

// getModel serves GET /v1/models/{model}; model names may hold slashes.
func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	m, ok := s.models[name]
	if !ok {
		writeProxyError(w, http.StatusNotFound, "The model `"+name+"` does not exist", "invalid_request_error", "model")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": m.Name, "object": "model", "created": 1677610602, "owned_by": m.Provider})
}
