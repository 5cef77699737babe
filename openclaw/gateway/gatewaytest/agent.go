package gatewaytest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// AgentParams is what a client sent in an agent request.
type AgentParams struct {
	Message           string `json:"message"`
	AgentID           string `json:"agentId"`
	SessionKey        string `json:"sessionKey"`
	IdempotencyKey    string `json:"idempotencyKey"`
	Model             string `json:"model"`
	Timeout           int64  `json:"timeout"`
	ExtraSystemPrompt string `json:"extraSystemPrompt"`
}

// CanonicalKey returns a session key the way the gateway names it in events:
// lowercased, and prefixed with "agent:<agentID>:" ("main" by default) unless it
// already is agent-scoped.
func CanonicalKey(agentID, key string) string {
	k := strings.ToLower(strings.TrimSpace(key))
	if k == "" || k == "global" || k == "unknown" || strings.HasPrefix(k, "agent:") {
		return k
	}
	a := strings.ToLower(strings.TrimSpace(agentID))
	if a == "" {
		a = "main"
	}
	return "agent:" + a + ":" + k
}

// Run is an accepted agent run, for scripting its events and final response.
// Events are broadcast to every connection of the server, as the real gateway
// broadcasts them to every operator.
type Run struct {
	// Conn is the connection that started the run; ReqID is its request id.
	Conn  *Conn
	ReqID string
	// RunID is the run id (the idempotency key); SessionKey is canonical.
	RunID      string
	SessionKey string
	// Params is the agent request.
	Params AgentParams

	mu   sync.Mutex
	seq  int64
	text strings.Builder
}

// Accept decodes an agent request and answers it with the first of its two
// responses: {runId, status:"accepted", sessionKey, acceptedAt}.
func (c *Conn) Accept(req Request) (*Run, error) {
	if req.Method != "agent" {
		return nil, errors.New("gatewaytest: Accept on a " + req.Method + " request")
	}
	var p AgentParams
	if err := req.Decode(&p); err != nil {
		return nil, err
	}
	if strings.TrimSpace(p.Message) == "" || p.IdempotencyKey == "" {
		_ = c.ReplyError(req.ID, Error{Code: "INVALID_REQUEST", Message: "invalid agent params: message and idempotencyKey are required"}, nil)
		return nil, errors.New("gatewaytest: agent request without message or idempotencyKey")
	}
	r := &Run{Conn: c, ReqID: req.ID, RunID: p.IdempotencyKey, SessionKey: CanonicalKey(p.AgentID, p.SessionKey), Params: p}
	err := c.Reply(req.ID, map[string]any{
		"runId": r.RunID, "status": "accepted", "sessionKey": r.SessionKey, "agentId": "main",
		"acceptedAt": time.Now().UnixMilli(),
	})
	return r, err
}

func (r *Run) nextSeq() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	return r.seq
}

// Delta broadcasts a chat delta event carrying text (and the cumulative message).
func (r *Run) Delta(text string) {
	r.mu.Lock()
	r.text.WriteString(text)
	all := r.text.String()
	r.seq++
	seq := r.seq
	r.mu.Unlock()
	r.Conn.s.Broadcast("chat", ChatDelta(r.RunID, r.SessionKey, seq, text, all))
}

// AgentEvent broadcasts an agent stream event (e.g. stream "tool").
func (r *Run) AgentEvent(stream string, data map[string]any) {
	r.Conn.s.Broadcast("agent", AgentEvent(r.RunID, r.SessionKey, r.nextSeq(), stream, data))
}

// ChatFinal broadcasts the chat final event.
func (r *Run) ChatFinal() {
	r.mu.Lock()
	all := r.text.String()
	r.mu.Unlock()
	r.Conn.s.Broadcast("chat", map[string]any{
		"runId": r.RunID, "sessionKey": r.SessionKey, "seq": r.nextSeq(), "state": "final",
		"message": assistantMessage(all),
	})
}

// Finish sends the second, final response of the agent call with status "ok",
// "error" or "timeout" and the given payload texts.
func (r *Run) Finish(status string, texts ...string) error {
	return r.Conn.Reply(r.ReqID, FinalPayload(r.RunID, status, texts...))
}

// Fail sends a final response with ok:false carrying both a payload (status
// "error") and the error, as the gateway does for runs that throw.
func (r *Run) Fail(e Error) error {
	return r.Conn.ReplyError(r.ReqID, e, map[string]any{"runId": r.RunID, "status": "error", "summary": e.Message})
}

// FinalPayload builds the final agent response payload.
func FinalPayload(runID, status string, texts ...string) map[string]any {
	payloads := make([]map[string]any, 0, len(texts))
	for _, t := range texts {
		payloads = append(payloads, map[string]any{"text": t, "mediaUrl": nil})
	}
	summary := map[string]string{"ok": "completed", "timeout": "aborted", "error": "failed"}[status]
	return map[string]any{
		"runId": runID, "status": status, "summary": summary,
		"result": map[string]any{
			"payloads": payloads,
			"meta":     map[string]any{"durationMs": 12, "agentMeta": map[string]any{"provider": "fake", "model": "fake-model"}},
		},
	}
}

// ChatDelta builds a chat delta event payload.
func ChatDelta(runID, sessionKey string, seq int64, delta, cumulative string) map[string]any {
	p := map[string]any{"runId": runID, "seq": seq, "state": "delta", "deltaText": delta, "message": assistantMessage(cumulative)}
	if sessionKey != "" {
		p["sessionKey"] = sessionKey
	}
	return p
}

// AgentEvent builds an agent event payload.
func AgentEvent(runID, sessionKey string, seq int64, stream string, data map[string]any) map[string]any {
	p := map[string]any{"runId": runID, "seq": seq, "stream": stream, "ts": time.Now().UnixMilli(), "data": data}
	if sessionKey != "" {
		p["sessionKey"] = sessionKey
	}
	return p
}

func assistantMessage(text string) map[string]any {
	return map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": text}}}
}

// EchoAgent is the default handler: it answers every request with Serve.
func EchoAgent(c *Conn) {
	ctx := context.Background()
	for {
		req, err := c.Next(ctx)
		if err != nil {
			return
		}
		c.Serve(req)
	}
}

// Serve answers one request the way EchoAgent does, for handlers that script
// some requests and leave the rest to the double: agent streams the message
// back word by word and finishes with "echo: <message>"; chat.abort and
// agent.wait answer plausibly; sessions.patch resolves the model (refusing a
// provider or model the double's config does not list, when it lists any);
// config.get and config.patch serve the double's config (see WithConfig);
// other methods are refused.
func (c *Conn) Serve(req Request) {
	switch req.Method {
	case "agent":
		run, err := c.Accept(req)
		if err != nil {
			return
		}
		for _, w := range strings.Fields(run.Params.Message) {
			run.Delta(w + " ")
		}
		run.ChatFinal()
		_ = run.Finish("ok", "echo: "+run.Params.Message)
	case "chat.abort":
		var p struct {
			RunID string `json:"runId"`
		}
		_ = req.Decode(&p)
		ids := []string{}
		if p.RunID != "" {
			ids = append(ids, p.RunID)
		}
		_ = c.Reply(req.ID, map[string]any{"ok": true, "aborted": p.RunID != "", "runIds": ids})
	case "sessions.patch":
		var p struct {
			Key   string  `json:"key"`
			Model *string `json:"model"`
		}
		if err := req.Decode(&p); err != nil || p.Key == "" {
			_ = c.ReplyError(req.ID, Error{Code: "INVALID_REQUEST", Message: "invalid sessions.patch params"}, nil)
			return
		}
		provider, model := "fake", "fake-model"
		if p.Model != nil {
			if a, b, ok := strings.Cut(*p.Model, "/"); ok {
				provider, model = a, b
			} else {
				model = *p.Model
			}
			if !c.s.modelListed(provider, model) {
				_ = c.ReplyError(req.ID, Error{Code: "INVALID_REQUEST", Message: "model not allowed: " + *p.Model}, nil)
				return
			}
		}
		_ = c.Reply(req.ID, map[string]any{"ok": true, "key": CanonicalKey("", p.Key),
			"resolved": map[string]any{"modelProvider": provider, "model": model}})
	case "agent.wait":
		var p struct {
			RunID string `json:"runId"`
		}
		_ = req.Decode(&p)
		_ = c.Reply(req.ID, map[string]any{"runId": p.RunID, "status": "ok", "startedAt": 1, "endedAt": 2})
	case "config.get":
		_ = c.Reply(req.ID, c.s.configSnapshot())
	case "config.patch":
		c.s.configPatch(c, req)
	default:
		_ = c.ReplyError(req.ID, Error{Code: "INVALID_REQUEST", Message: "unknown method: " + req.Method}, nil)
	}
}
