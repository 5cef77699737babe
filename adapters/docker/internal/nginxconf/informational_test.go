package nginxconf

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// TestNginxResponseHeaderFilter: the njs filter keeps only the allowlisted
// response headers (a header no list names, as an upstream may add tomorrow,
// does not pass), and an upstream's informational answers never reach the
// agent: an unsolicited 100 followed by a 199 carrying a hidden header, a 103
// with Link, and an unsolicited 101 each end the call without a byte to the
// client (nginx would relay the first as the final answer and the rest as its
// body), recorded in the audit as the upstream's fault.
func TestNginxResponseHeaderFilter(t *testing.T) {
	bin := testenv.NeedCommand(t, "nginx", "nginx")
	const canary = "informational-canary"
	answers := map[string]string{
		"/v1/chat/completions": "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Litellm-Call-Id: call-1\r\nX-Brand-New-Secret: " + canary + "\r\n\r\n{}",
		"/v1/completions":      "HTTP/1.1 100 Continue\r\nX-Ratelimit-Remaining-Tokens: " + canary + "\r\n\r\nHTTP/1.1 199 Whatever\r\nX-Ratelimit-Remaining-Tokens: " + canary + "\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"/v1/embeddings":       "HTTP/1.1 103 Early Hints\r\nLink: </" + canary + ">; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"/v1/responses":        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nraw-" + canary,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				line, _ := br.ReadString('\n')
				for {
					l, err := br.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				f := strings.Fields(line)
				if len(f) > 1 {
					_, _ = io.WriteString(c, answers[f[1]])
				}
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				_, _ = io.Copy(io.Discard, br) // until nginx closes
			}()
		}
	}()
	spec := port.ProxySpec{RunID: "run-1xx", Attempt: 1, Upstream: "http://" + ln.Addr().String(), APIKey: "sk-1xx",
		Attribution: port.Attribution{BillingAccountID: "acct-1", UserID: "user-1", GraphID: "g", SessionID: "s"}}
	px := startNginx(t, bin, spec, NginxConfig{})
	got := map[string]string{}
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"} {
		c, err := net.Dial("unix", px.sock)
		require.NoError(t, err)
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: llm\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", path)
		require.NoError(t, err)
		raw, err := io.ReadAll(c)
		c.Close()
		require.NoError(t, err, path)
		got[path] = string(raw)
		assert.NotContains(t, string(raw), canary, "%s: the upstream's hidden header or bytes reached the client:\n%s", path, raw)
	}
	ok := got["/v1/chat/completions"]
	assert.True(t, strings.HasPrefix(ok, "HTTP/1.1 200 "), ok)
	assert.Contains(t, ok, "X-Litellm-Call-Id: call-1", "an allowlisted header passes")
	for _, path := range []string{"/v1/completions", "/v1/embeddings", "/v1/responses"} {
		// Cut without a byte, or (when nginx gave up on the upstream first) its JSON 502.
		if g := got[path]; g != "" && !(strings.HasPrefix(g, "HTTP/1.1 502 ") && strings.Contains(g, `"type":"upstream_error"`)) {
			t.Errorf("%s: an informational answer must cut the call, got:\n%s", path, g)
		}
	}
	px.stop(t)

	f, err := os.Open(px.audit)
	require.NoError(t, err)
	defer f.Close()
	a, err := ReadAudit(f, AuditLimits{})
	require.NoError(t, err)
	require.Len(t, a.Records, 4)
	for _, r := range a.Records {
		t.Logf("%s: status %d, error %q", r.Path, r.Status, r.Error)
		if r.Path == "/v1/chat/completions" {
			assert.Empty(t, r.Error, "%+v", r)
			continue
		}
		assert.True(t, strings.HasPrefix(r.Error, "upstream: "), "%+v", r)
	}
}
