package llmproxy

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

func TestCleanPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/v1/chat/completions": true, "/v1/models/": false, "/": true,
		"": false, "v1/x": false, "/v1/../spend": false, "/v1//x": false, "/v1/./x": false,
		"/v1/a%2fb": false, `/v1/a\b`: false, "/v1/a b": false, "/v1/a\x7f": false, "/v1/a\nb": false,
	} {
		if got := CleanPath(p); got != want {
			t.Errorf("CleanPath(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	req := func(method string, hdr http.Header, n int64) *http.Request {
		r := httptest.NewRequest(method, "/v1/chat/completions", strings.NewReader(""))
		for k, v := range hdr {
			r.Header[k] = v
		}
		r.ContentLength = n
		return r
	}
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete} {
		if ref := Check(req(m, nil, 10), 100); ref != nil {
			t.Errorf("%s refused: %+v", m, ref)
		}
	}
	for name, c := range map[string]struct {
		r       *http.Request
		status  int
		blocked string
	}{
		"upgrade": {req(http.MethodGet, http.Header{"Upgrade": {"websocket"}}, 0), 501, "upgrade_refused"},
		"large":   {req(http.MethodPost, nil, 101), 413, "request_too_large"},
	} {
		ref := Check(c.r, 100)
		if ref == nil || ref.Status != c.status || ref.Blocked != c.blocked {
			t.Errorf("%s: %+v, want %d %s", name, ref, c.status, c.blocked)
		}
	}
}

func TestNoteResponseHidesSharedKeyHeaders(t *testing.T) {
	resp := &http.Response{Header: http.Header{
		"X-Litellm-Call-Id":          {"call-1"},
		"X-Litellm-Response-Cost":    {"0.001"},
		"X-Litellm-Key-Spend":        {"123.4"},
		"X-Litellm-Model-Api-Base":   {"https://internal.example"},
		"Content-Type":               {"text/event-stream; charset=utf-8"},
		"X-Litellm-Model-Group":      {"gpt"},
		"Llm_provider-X-Request-Id":  {"abc"},
		"X-Ratelimit-Remaining-Reqs": {"5"},
	}}
	var rec port.AuditRecord
	if !NoteResponse(resp, &rec) || !rec.Streamed {
		t.Error("an event stream was not noted")
	}
	if rec.CallID != "call-1" || rec.ResponseCost != "0.001" {
		t.Errorf("record %+v", rec)
	}
	for _, h := range []string{"X-Litellm-Key-Spend", "X-Litellm-Model-Api-Base", "Llm_provider-X-Request-Id"} {
		if _, ok := resp.Header[h]; ok {
			t.Errorf("%s reached the sandbox", h)
		}
	}
	if resp.Header.Get("X-Litellm-Call-Id") != "call-1" {
		t.Error("the call id is the agent's to see")
	}
}

func TestOutcomeOrder(t *testing.T) {
	up, cut, wr := errors.New("dial"), errors.New("reset"), errors.New("broken pipe")
	for _, c := range []struct {
		o    Outcome
		want string
	}{
		{Outcome{}, ""},
		{Outcome{StreamError: "upstream error event (type=x, code=1)"}, "upstream error event (type=x, code=1)"},
		{Outcome{Upstream: up, ClientGone: true, Write: wr}, "client went away before the upstream answered: dial"},
		{Outcome{Upstream: up, Response: cut}, "upstream: dial"},
		{Outcome{Response: cut, Write: wr, Panicked: true}, "upstream response cut: reset"},
		{Outcome{Write: wr, Panicked: true, StreamError: "e"}, "client went away: broken pipe"},
		{Outcome{Panicked: true, StreamError: "e"}, "response aborted"},
	} {
		if got := c.o.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}

func TestWriteErrorShape(t *testing.T) {
	w := httptest.NewRecorder()
	sw := &StatusWriter{ResponseWriter: w}
	n := WriteRefusal(sw, &RouteNotAllowed)
	body, _ := io.ReadAll(w.Result().Body)
	if sw.Status != 404 || n != int64(len(body)) || sw.N != n || w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("status %d, n %d/%d, header %v", sw.Status, n, sw.N, w.Header())
	}
	var e struct {
		Error struct {
			Message, Type, Code string
			Param               *string
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Type != "not_found" || e.Error.Code != "404" || e.Error.Message != RouteNotAllowed.Message {
		t.Errorf("body %s: %v", body, err)
	}
}

func TestErrorEventNeverHoldsTheMessage(t *testing.T) {
	got := ErrorEvent("invalid_request_error", "400")
	if got != "upstream error event (type=invalid_request_error, code=400)" {
		t.Errorf("%q", got)
	}
	if long := ErrorEvent(strings.Repeat("t", 500), strings.Repeat("c", 500)); len(long) > 160 {
		t.Errorf("summary not bounded: %d bytes", len(long))
	}
}

func TestUpstreamFailure(t *testing.T) {
	if s, _, _ := UpstreamFailure(&http.MaxBytesError{Limit: 1}, false); s != 413 {
		t.Errorf("body limit gave %d", s)
	}
	if s, _, _ := UpstreamFailure(errors.New("refused"), true); s != 413 {
		t.Errorf("body over limit gave %d", s)
	}
	if s, typ, _ := UpstreamFailure(errors.New("refused"), false); s != 502 || typ != "upstream_error" {
		t.Errorf("unreachable gave %d %s", s, typ)
	}
}

// The key must never go through a proxy taken from the environment, and the taps
// must see bodies as the upstream sent them.
func TestNewTransportIgnoresProxyEnvironment(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
	t.Setenv("HTTP_PROXY", "http://proxy.invalid:3128")
	tr := NewTransport()
	if tr.Proxy != nil {
		u, _ := tr.Proxy(httptest.NewRequest(http.MethodPost, "https://litellm.example/v1/chat/completions", nil))
		t.Errorf("transport uses a proxy: %v", u)
	}
	if !tr.DisableCompression || tr.ResponseHeaderTimeout != 0 {
		t.Errorf("compression off %v, response header timeout %v", tr.DisableCompression, tr.ResponseHeaderTimeout)
	}
}
