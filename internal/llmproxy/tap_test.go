package llmproxy

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

func drain(t *testing.T, tap *ResponseTap) (port.AuditRecord, Outcome) {
	t.Helper()
	start := time.Now()
	_, _ = io.Copy(io.Discard, iotest.OneByteReader(tap)) // byte by byte: scanning must not depend on chunking
	var rec port.AuditRecord
	var o Outcome
	tap.Finish(&rec, start, &o)
	return rec, o
}

func TestResponseTapPlainBody(t *testing.T) {
	var charged int64
	body := `{"id":"chatcmpl-1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`
	rec, o := drain(t, NewResponseTap(io.NopCloser(strings.NewReader(body)), false, func(n int64) { charged += n }))
	if rec.RequestID != "chatcmpl-1" || charged != 10 || o.Error() != "" || rec.TTFB < 0 {
		t.Errorf("record %+v, charged %d, outcome %q", rec, charged, o.Error())
	}
}

func TestResponseTapStreamChargesCumulativeUsageOnce(t *testing.T) {
	var charged int64
	stream := "data: {\"id\":\"chatcmpl-2\",\"choices\":[]}\n\n" +
		"data: {\"id\":\"chatcmpl-2\",\"usage\":{\"total_tokens\":4}}\n\n" +
		"data: {\"id\":\"chatcmpl-2\",\"usage\":{\"total_tokens\":9}}\n\n" +
		"data: {\"error\":{\"message\":\"secret prompt text\",\"type\":\"server_error\",\"code\":500}}\n\n" +
		"data: [DONE]\n\n"
	rec, o := drain(t, NewResponseTap(io.NopCloser(strings.NewReader(stream)), true, func(n int64) { charged += n }))
	if rec.RequestID != "chatcmpl-2" || charged != 9 {
		t.Errorf("record %+v, charged %d (want 9: usage is cumulative)", rec, charged)
	}
	if o.StreamError != "upstream error event (type=server_error, code=500)" || strings.Contains(o.Error(), "secret") {
		t.Errorf("stream error %q", o.StreamError)
	}
}

func TestResponseTapCutBody(t *testing.T) {
	cut := errors.New("connection reset")
	tap := NewResponseTap(io.NopCloser(io.MultiReader(strings.NewReader(`{"id":"x"`), iotest.ErrReader(cut))), false, nil)
	_, o := drain(t, tap)
	if !errors.Is(o.Response, cut) || o.Error() != "upstream response cut: connection reset" {
		t.Errorf("outcome %+v", o)
	}
}

// Anthropic streams report input tokens in message_start and cumulative output
// tokens in message_delta; the Responses API nests usage in response.completed.
func TestResponseTapNestedStreams(t *testing.T) {
	for name, c := range map[string]struct {
		stream string
		id     string
		want   int64
	}{
		"anthropic": {"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", "msg_1", 40},
		"responses": {"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"usage\":null}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":{\"input_tokens\":5,\"output_tokens\":2,\"total_tokens\":7}}}\n\n", "resp_1", 7},
	} {
		var charged int64
		rec, _ := drain(t, NewResponseTap(io.NopCloser(strings.NewReader(c.stream)), true, func(n int64) { charged += n }))
		if rec.RequestID != c.id || charged != c.want {
			t.Errorf("%s: request id %q, charged %d, want %q and %d", name, rec.RequestID, charged, c.id, c.want)
		}
	}
}
