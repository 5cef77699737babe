package sandboxtest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// informationalCanary marks what a hostile upstream puts in its informational
// answers: none of it may reach the agent.
const informationalCanary = "informational-canary"

// newInformationalUpstream is the fake LiteLLM behind an upstream that answers a
// call whose prompt holds MARKER:inf100 with an unsolicited 100 and a 199
// carrying a shared-key header before its 200, MARKER:inf103 with a 103 Early
// Hints carrying Link and that header, and MARKER:inf101 with an unsolicited
// 101 followed by raw bytes.
func newInformationalUpstream(t *testing.T) *upstream {
	fake, err := litellmtest.NewUnstartedServer()
	if err != nil {
		t.Fatal(err)
	}
	hidden := "X-Ratelimit-Remaining-Tokens: " + informationalCanary + "\r\n"
	raw := func(w http.ResponseWriter, s string) {
		c, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		_, _ = buf.WriteString(s)
		_ = buf.Flush()
	}
	u := &upstream{fake: fake}
	u.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		switch {
		case bytes.Contains(body, []byte("MARKER:inf100")):
			raw(w, "HTTP/1.1 100 Continue\r\n"+hidden+"\r\nHTTP/1.1 199 Whatever\r\n"+hidden+"\r\n"+
				"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
			return
		case bytes.Contains(body, []byte("MARKER:inf101")):
			raw(w, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+hidden+"\r\nraw-"+informationalCanary)
			return
		case bytes.Contains(body, []byte("MARKER:inf103")):
			w.Header().Set("Link", "</"+informationalCanary+">; rel=preload")
			w.Header().Set("X-Ratelimit-Remaining-Tokens", informationalCanary)
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			w.Header().Del("X-Ratelimit-Remaining-Tokens")
		}
		fake.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() { u.http.Close(); fake.Close() })
	return u
}

// testUpstreamInformational: an upstream's informational answers never reach
// the agent. From inside a real sandbox, read byte for byte as the agent's
// client reads them: a 103 with Link, a 100 then a 199 carrying a header the
// allowlist hides, and an unsolicited 101 with raw bytes after it. A front
// either skips them and forwards the final answer (the Go fronts), refuses
// with its JSON 502, or cuts the call without a byte (nginx, which would
// otherwise relay the first status line as final and the rest as its body);
// no informational status line, hidden header or raw upstream byte reaches
// the agent.
func testUpstreamInformational(t *testing.T, h ProxyHarness) {
	u := newInformationalUpstream(t)
	ctype := [2]string{"Content-Type", "application/json"}
	var reqs []redTeamRequest
	for _, m := range []string{"inf103", "inf100", "inf101"} {
		reqs = append(reqs, redTeamRequest{Method: "POST", Path: "/v1/chat/completions", Headers: [][2]string{ctype},
			Body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:` + m + `"}]}`})
	}
	rawAnswers(t, h, u, "informational", reqs, func(out rawAnswer) {
		if strings.Contains(out.Raw, informationalCanary) {
			t.Errorf("request %d: the upstream's informational answer reached the agent:\n%s", out.I, out.Raw)
		}
		for _, line := range strings.Split(out.Raw, "\r\n") {
			if strings.HasPrefix(line, "HTTP/1.1 1") || strings.HasPrefix(line, "HTTP/1.0 1") {
				t.Errorf("request %d: an informational status line reached the agent: %q\n%s", out.I, line, out.Raw)
			}
		}
		head, body, _ := strings.Cut(out.Raw, "\r\n\r\n")
		switch {
		case out.Raw == "": // cut
		case strings.HasPrefix(head, "HTTP/1.1 200 "):
		case strings.HasPrefix(head, "HTTP/1.1 502 ") && strings.Contains(body, `"type":"upstream_error"`):
		default:
			t.Errorf("request %d: want the final answer, a JSON 502 or nothing, got:\n%s", out.I, out.Raw)
		}
	})
}
