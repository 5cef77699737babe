package nginxconf

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// TestNginxAuditFieldsAreInert is the Go fronts' AuditFieldsAreInert on the nginx
// front: control bytes an agent writes percent-encoded in a refused path (nginx
// logs the decoded $uri), and control bytes in the model name LiteLLM echoes in
// x-litellm-model-group, reach ReadAudit's records percent-encoded: what
// sandboxctl shows an operator holds no escape sequence, CR/LF or tab.
func TestNginxAuditFieldsAreInert(t *testing.T) {
	bin := testenv.NeedCommand(t, "nginx", "nginx")
	const model = "gpt\x1b[2J\x1b]0;owned\afake\trow\u202e"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Litellm-Model-Group", model)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`))
	}))
	defer up.Close()
	spec := port.ProxySpec{RunID: "run-inert", Attempt: 1, Upstream: up.URL, APIKey: "sk-inert",
		Attribution: port.Attribution{BillingAccountID: "acct-1", UserID: "user-1", GraphID: "g", SessionID: "s"}}
	px := startNginx(t, bin, spec, NginxConfig{})
	refused := px.raw(t, "GET /v1/%1b%5d0;owned%07%0d%0afake%09row%e2%80%ae HTTP/1.1")
	assert.Equal(t, http.StatusNotFound, refused.StatusCode)
	// Raw, because Go's client rightly refuses the header nginx passes on.
	c, err := net.Dial("unix", px.sock)
	require.NoError(t, err)
	body := `{"model":"x","messages":[]}`
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: llm\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	answer, err := io.ReadAll(c)
	c.Close()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(answer), "HTTP/1.1 200 "), "%s", answer)
	px.stop(t)

	f, err := os.Open(px.audit)
	require.NoError(t, err)
	defer f.Close()
	a, err := ReadAudit(f, AuditLimits{})
	require.NoError(t, err)
	require.Len(t, a.Records, 2)
	for _, r := range a.Records {
		for _, v := range []string{r.Path, r.Model} {
			if i := strings.IndexFunc(v, func(c rune) bool { return c < 0x20 || c == 0x7f || c == '\u202e' }); i >= 0 {
				t.Errorf("an audit record holds a control byte: path %q model %q", r.Path, r.Model)
			}
		}
	}
	assert.Equal(t, "/v1/%1B]0;owned%07%0D%0Afake%09row%E2%80%AE", a.Records[0].Path, "the refused path as sent")
	assert.Equal(t, "gpt%1B[2J%1B]0;owned%07fake%09row%E2%80%AE", a.Records[1].Model)
}
