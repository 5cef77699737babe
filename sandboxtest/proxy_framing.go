package sandboxtest

import (
	"strings"
	"testing"
)

// testRequestFraming: what frames a request body and the connection is the
// proxy's to say, on every front alike. From inside a real sandbox, raw requests:
// a JSON body whose Content-Type carries parameters (a multipart boundary, a
// charset) reaches the upstream as plain application/json; a body of another
// type is refused (400, "body_policy"); a request asking to switch protocols is
// refused (501, "no_upgrade") and never reaches the upstream, so no upstream
// answer can turn the agent's connection into a raw tunnel.
func testRequestFraming(t *testing.T, h ProxyHarness) {
	u := newUpstream(t)
	chat := func(marker string) string {
		return `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:` + marker + `"}]}`
	}
	const canary = "framing-canary"
	reqs := []redTeamRequest{
		{Method: "POST", Path: "/v1/chat/completions", Body: chat("fr1"),
			Headers: [][2]string{{"Content-Type", "application/json; boundary=" + canary + "; charset=utf-8"}}},
		{Method: "POST", Path: "/v1/chat/completions", Body: chat("fr2"),
			Headers: [][2]string{{"Content-Type", "text/plain; charset=" + canary}}},
		{Method: "POST", Path: "/v1/chat/completions", Body: chat("fr3"),
			Headers: [][2]string{{"Content-Type", "application/json"}, {"Connection", "Upgrade"}, {"Upgrade", "websocket"}}},
		{Method: "POST", Path: "/chat/completions", Body: chat("fr4"),
			Headers: [][2]string{{"Content-Type", "multipart/form-data; boundary=" + canary}}},
	}
	// What each request must get: the status and a text of the body.
	want := []struct{ status, text string }{
		{"200", "ECHO:fr1"},
		{"400", "body_policy"},
		{"501", "no_upgrade"},
		{"400", "body_policy"},
	}
	rawAnswers(t, h, u, "framing", reqs, func(out rawAnswer) {
		w := want[out.I]
		head, body, _ := strings.Cut(out.Raw, "\r\n\r\n")
		if !strings.HasPrefix(head, "HTTP/1.1 "+w.status+" ") || !strings.Contains(body, w.text) {
			t.Errorf("request %d (%v): want status %s and %q in the body, got:\n%s", out.I, reqs[out.I].Headers, w.status, w.text, out.Raw)
		}
		if strings.Contains(strings.ToLower(head), "\nupgrade:") || strings.Contains(head, " 101 ") {
			t.Errorf("request %d: the answer switches protocols:\n%s", out.I, head)
		}
	})
	seen := chatRequests(u)
	if len(seen) != 1 {
		t.Errorf("the upstream saw %d chat requests, want only the first", len(seen))
	}
	for _, r := range seen {
		if !strings.Contains(string(r.Body), "MARKER:fr1") {
			t.Errorf("a refused request reached the upstream: %s", r.Body)
		}
		if ct := r.Header.Values("Content-Type"); len(ct) != 1 || ct[0] != "application/json" {
			t.Errorf("Content-Type at the upstream: %q, want exactly application/json", ct)
		}
		if up := r.Header.Get("Upgrade"); up != "" {
			t.Errorf("Upgrade reached the upstream: %q", up)
		}
		for name, vals := range r.Header {
			for _, v := range vals {
				if strings.Contains(v, canary) {
					t.Errorf("the agent's Content-Type parameters reached the upstream: %s: %q", name, v)
				}
			}
		}
	}
}
