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
