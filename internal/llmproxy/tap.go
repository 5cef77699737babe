package llmproxy

import (
	"encoding/json"
	"io"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// scanLimit bounds the bytes kept per scanned JSON value (a model name, a response
// id, a usage or error object).
const scanLimit = 2048

// ResponseTap counts and scans a response body as the ReverseProxy copies it to
// the client (all in the handler's goroutine): the time of the first byte, the
// response id, the reported usage and the first in-stream error, for plain JSON
// responses and server-sent event streams alike, holding at most a few KB per
// call.
type ResponseTap struct {
	rc        io.ReadCloser
	addTokens func(int64)
	sc        *jsonFields
	sse       *sseFields
	first     time.Time
	err       error
	firstID   string
	tokens    int64 // charged so far
	haveUsage bool  // a plain body's usage was charged
	input     int64 // input tokens an Anthropic stream reported in message_start
	errEvent  string
	genAI     GenAIUsage
}

// GenAIUsage is what a response said about the model and its token use, for
// telemetry (the GenAI semantic conventions).
type GenAIUsage struct {
	Model         string
	Input, Output int64
}

// note keeps the last reported input and output counts (an Anthropic stream
// reports input at message_start and output in message_delta).
func (g *GenAIUsage) note(u usage) {
	if in := u.Prompt + u.Input; in > 0 {
		g.Input = in
	}
	if out := u.Completion + u.Output; out > 0 {
		g.Output = out
	}
}

// noteModel keeps the first model a response named.
func (g *GenAIUsage) noteModel(m string) {
	if g.Model == "" && m != "" {
		g.Model = Clip(m, 128)
	}
}

// GenAI returns what the response said about its model and token use; call it
// after Finish.
func (t *ResponseTap) GenAI() GenAIUsage { return t.genAI }

// NewResponseTap wraps body. addTokens (may be nil) is charged with the call's
// token usage as soon as the bytes that report it pass, before they reach the
// client: an agent that waits for one answer before its next call cannot slip a
// call past a token budget.
func NewResponseTap(body io.ReadCloser, streamed bool, addTokens func(int64)) *ResponseTap {
	t := &ResponseTap{rc: body, addTokens: addTokens, sc: newJSONFields(scanLimit, "id", "usage", "error", "model")}
	if streamed {
		// Anthropic's message_start and the Responses API's events nest the id and
		// usage in "message" or "response" (kept when small enough).
		t.sc = newJSONFields(scanLimit, "id", "usage", "error", "message", "response", "model")
		t.sse = newSSEFields(t.sc, t.onEvent)
	}
	return t
}

// Read implements io.Reader.
func (t *ResponseTap) Read(b []byte) (int, error) {
	n, err := t.rc.Read(b)
	if n > 0 {
		if t.first.IsZero() {
			t.first = time.Now()
		}
		if t.sse != nil {
			t.sse.Write(b[:n])
		} else {
			t.sc.Write(b[:n])
			if !t.haveUsage {
				if n, ok := t.sc.tokens(); ok {
					t.haveUsage = true
					t.count(n)
				}
			}
		}
	}
	if err != nil && err != io.EOF && t.err == nil {
		t.err = err
	}
	return n, err
}

// Close implements io.Closer.
func (t *ResponseTap) Close() error { return t.rc.Close() }

// count makes n the call's token total and charges the difference (usage is
// cumulative across a stream's events).
func (t *ResponseTap) count(n int64) {
	if n <= t.tokens { // a smaller (or negative) later report refunds nothing
		return
	}
	if t.addTokens != nil {
		t.addTokens(n - t.tokens)
	}
	t.tokens = n
}

// onEvent takes the response id from the first SSE event that has one, the last
// reported usage, and the first error event.
func (t *ResponseTap) onEvent(sc *jsonFields) {
	for _, k := range []string{"message", "response"} {
		var inner struct {
			ID    string `json:"id"`
			Model string `json:"model"`
			Usage *usage `json:"usage"`
		}
		raw, ok := sc.got[k]
		if !ok || json.Unmarshal(raw, &inner) != nil {
			continue
		}
		if t.firstID == "" {
			t.firstID = inner.ID
		}
		t.genAI.noteModel(inner.Model)
		if u := inner.Usage; u != nil {
			t.genAI.note(*u)
			if k == "message" {
				t.input = u.Input
			}
			t.count(u.total())
		}
	}
	if t.firstID == "" {
		t.firstID = sc.str("id")
	}
	t.genAI.noteModel(sc.str("model"))
	if raw, ok := sc.got["usage"]; ok {
		var u usage
		if json.Unmarshal(raw, &u) == nil {
			t.genAI.note(u)
			n := u.total()
			if u.Input == 0 && u.Prompt == 0 && u.Total == 0 {
				n += t.input // Anthropic's message_delta counts output only
			}
			if n > 0 {
				t.count(n)
			}
		}
	}
	if t.errEvent == "" {
		t.errEvent = sc.errorSummary()
	}
}

// Finish completes rec (time to first byte from start, the response id) and o
// (a cut response, an in-stream error) once the body has been copied.
func (t *ResponseTap) Finish(rec *port.AuditRecord, start time.Time, o *Outcome) {
	if !t.first.IsZero() {
		rec.TTFB = t.first.Sub(start)
	}
	if t.sse != nil {
		t.sse.flush()
	} else {
		rec.RequestID = Clip(t.sc.str("id"), 256)
		t.genAI.noteModel(t.sc.str("model"))
		var u usage
		if raw, ok := t.sc.got["usage"]; ok && json.Unmarshal(raw, &u) == nil {
			t.genAI.note(u)
		}
	}
	if rec.RequestID == "" {
		rec.RequestID = Clip(t.firstID, 256)
	}
	o.Response, o.StreamError = t.err, t.errEvent
}
