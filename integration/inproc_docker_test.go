package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestDockerSandboxReachesProxy is the whole path with a real sandbox: a container with
// no network, as uid 1001, read-only root, reaches this process's proxy through the
// bridge and the bind-mounted per-run directory; the kernel's peer check lets uid 1001
// in (it would disconnect any other uid); spoofed headers from the agent never reach the upstream.
func TestDockerSandboxReachesProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli := dockerClient(t)
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	require.NoError(t, err)
	require.NoError(t, testimages.EnsureDocker(ctx, cli, ref, archive))
	bin := testenv.Bridge(t)

	var (
		mu   sync.Mutex
		seen []http.Header
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, completionBody)
	}))
	defer up.Close()
	base, err := os.MkdirTemp("", "e2e")
	require.NoError(t, err)
	defer os.RemoveAll(base)
	m, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithSandboxUID(1001))
	require.NoError(t, err)
	defer m.Shutdown(context.Background())
	p, err := m.StartProxy(ctx, port.ProxySpec{
		RunID: testRunID("e2e"), Upstream: up.URL, APIKey: testKey,
		Attribution: port.Attribution{BillingAccountID: "acct-42"},
	})
	require.NoError(t, err)
	runner, err := docker.NewRunner(docker.WithClient(cli), docker.WithBridge(bin))
	require.NoError(t, err)
	sock := p.Socket()

	res, err := runner.RunOnce(ctx, port.RunSpec{
		RunID: p.RunID(), Image: ref, LLM: &sock,
		// An IP, not "localhost": Go's resolver in a scratch image without
		// /etc/nsswitch.conf asks DNS first and gives up when there is none.
		Env:  map[string]string{"OPENAI_API_BASE": "http://127.0.0.1:8080"},
		Argv: []string{"/agent", "chat", "gpt-test", "hello from the sandbox", "--spoof"},
	})
	require.NoError(t, err, "stderr: %s", res.Stderr)
	require.Equal(t, 0, res.ExitCode, "stdout: %s\nstderr: %s", res.Stdout, res.Stderr)
	assert.Equal(t, "status 200\n"+completionBody+"\n", string(res.Stdout))

	headers := func() []http.Header {
		mu.Lock()
		defer mu.Unlock()
		return append([]http.Header(nil), seen...)
	}
	require.Len(t, headers(), 1)
	h := headers()[0]
	assert.Equal(t, []string{"Bearer " + testKey}, h.Values("Authorization"))
	assert.Equal(t, []string{"acct-42"}, h.Values(proxypolicy.HeaderEndUserID))
	var md proxypolicy.SpendLogsMetadata
	require.NoError(t, json.Unmarshal([]byte(h.Get(proxypolicy.HeaderSpendLogsMetadata)), &md))
	assert.Equal(t, p.RunID(), md.RunID)
	for name := range h {
		if strings.HasPrefix(name, "X-Litellm-") {
			assert.Contains(t, []string{proxypolicy.HeaderEndUserID, proxypolicy.HeaderSpendLogsMetadata}, name)
		}
	}
	assert.Empty(t, h.Values("X-Api-Key"))
	assert.Empty(t, h.Values("Cookie"))

	// Another uid gets disconnected by the kernel-checked peer test before any HTTP.
	res, err = runner.RunOnce(ctx, port.RunSpec{
		RunID: p.RunID(), Image: ref, LLM: &sock, User: "1002:1002",
		Env:  map[string]string{"OPENAI_API_BASE": "http://127.0.0.1:8080"},
		Argv: []string{"/agent", "chat", "gpt-test", "hello"},
	})
	require.NoError(t, err)
	assert.Equal(t, 3, res.ExitCode, "stdout: %s", res.Stdout)
	assert.Contains(t, string(res.Stderr), "llm call failed")
	assert.Len(t, headers(), 1, "nothing from uid 1002 reached the upstream")

	recs, err := p.Stop(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, http.StatusOK, recs[0].Status)
	assert.Equal(t, "gpt-test", recs[0].Model)
	assert.Equal(t, "chatcmpl-abc123", recs[0].RequestID)
}

const (
	testKey        = "sk-upstream-master-key"
	completionBody = `{"id":"chatcmpl-abc123","object":"chat.completion","model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"hello"}}],"usage":{"total_tokens":30}}`
)

func testRunID(prefix string) string {
	return prefix + "-" + time.Now().UTC().Format("150405.000000")
}
