package inprocproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

const testKey = "sk-upstream-master-key"

// upstream is a fake LiteLLM that records what reaches it.
type upstream struct {
	*httptest.Server
	mu    sync.Mutex
	seen  []seenReq
	route func(w http.ResponseWriter, r *http.Request) // optional override
}

type seenReq struct {
	Method, Path string
	Header       http.Header
	Body         string
}

const completionBody = `{"id":"chatcmpl-abc123","object":"chat.completion","model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"hello"}}],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}`

// apiError is the OpenAI/LiteLLM error body agents see, as the wire has it.
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, seenReq{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: string(body)})
		route := u.route
		u.mu.Unlock()
		if route != nil {
			route(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-litellm-call-id", "call-0001")
		w.Header().Set("x-litellm-key-spend", "1234.5")
		w.Header().Set("llm_provider-openai-organization", "org-secret")
		w.Header().Set("x-litellm-response-cost", "0.000123")
		_, _ = io.WriteString(w, completionBody)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []seenReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenReq(nil), u.seen...)
}

func (u *upstream) setRoute(f func(w http.ResponseWriter, r *http.Request)) {
	u.mu.Lock()
	u.route = f
	u.mu.Unlock()
}

func testSpec(runID, upstreamURL string) port.ProxySpec {
	return port.ProxySpec{
		RunID: runID, Attempt: 1, Upstream: upstreamURL, APIKey: testKey,
		Attribution: port.Attribution{BillingAccountID: "acct-42", UserID: "user-7", GraphID: "sandbox:agent", SessionID: "sess-1"},
	}
}

// newManager returns a manager over a fresh base directory; its proxies are stopped at
// the end of the test.
func newManager(t testing.TB, opts ...Option) (*Manager, string) {
	base := shortTempDir(t)
	m, err := NewManager(append([]Option{WithBaseDir(base), WithOwner("test")}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m, base
}

// shortTempDir is a temporary directory with a short path: t.TempDir's long names can
// push socket paths past the kernel's limit.
func shortTempDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "ip")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func start(t testing.TB, m *Manager, spec port.ProxySpec) *Proxy {
	p, err := m.StartProxy(context.Background(), spec)
	require.NoError(t, err)
	return p
}

// client talks HTTP to a proxy over its unix socket, as the in-sandbox bridge does.
func client(p *Proxy) *http.Client {
	sock := p.SocketPath()
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableCompression: true,
	}}
}

func post(t testing.TB, c *http.Client, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost:8080"+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func get(t testing.TB, c *http.Client, path string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost:8080"+path, nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

const chatRequest = `{"messages":[{"role":"user","content":"the prompt must never be audited"}],"model":"gpt-test","stream":false}`

func TestSpoofedHeadersNeverReachUpstream(t *testing.T) {
	up := newUpstream(t)
	m, _ := newManager(t)
	p := start(t, m, testSpec("run-hdr", up.URL))

	resp, body := post(t, client(p), "/v1/chat/completions", chatRequest, map[string]string{
		"Authorization":                 "Bearer sk-agent-own-key",
		"X-Api-Key":                     "sk-agent-other",
		"Api-Key":                       "sk-azure-style",
		"Cookie":                        "session=1",
		"X-Litellm-End-User-Id":         "someone-else",
		"x-litellm-customer-id":         "someone-else",
		"X-LiteLLM-Spend-Logs-Metadata": `{"run_id":"other-run"}`,
		"x-litellm-api-key":             "sk-agent",
		"X-Real-Ip":                     "10.0.0.1",
		"Accept-Encoding":               "gzip",
		"X-Custom":                      "kept",
	})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, completionBody, body)
	assert.Equal(t, "call-0001", resp.Header.Get("x-litellm-call-id"), "LiteLLM's call id is passed back")
	assert.Empty(t, resp.Header.Get("x-litellm-key-spend"), "the shared key's spend is hidden")
	assert.Empty(t, resp.Header.Get("llm_provider-openai-organization"), "provider headers are hidden")

	reqs := up.requests()
	require.Len(t, reqs, 1)
	h := reqs[0].Header
	assert.Equal(t, "/v1/chat/completions", reqs[0].Path)
	assert.JSONEq(t, `{"messages":[{"role":"user","content":"the prompt must never be audited"}],"model":"gpt-test","stream":false,"user":"acct-42"}`, reqs[0].Body, "the body is forwarded with the run's end user")
	assert.Equal(t, []string{"Bearer " + testKey}, h.Values("Authorization"))
	assert.Equal(t, []string{"acct-42"}, h.Values(proxypolicy.HeaderEndUserID))
	var md proxypolicy.SpendLogsMetadata
	require.NoError(t, json.Unmarshal([]byte(h.Get(proxypolicy.HeaderSpendLogsMetadata)), &md))
	assert.Equal(t, proxypolicy.SpendLogsMetadata{RunID: "run-hdr", Attempt: 1, UserID: "user-7", GraphID: "sandbox:agent", SessionID: "sess-1"}, md)
	for _, name := range []string{"X-Api-Key", "Api-Key", "Cookie", "X-Litellm-Customer-Id", "X-Litellm-Api-Key", "X-Real-Ip", "Accept-Encoding"} {
		assert.Empty(t, h.Values(name), "header %s must not reach the upstream", name)
	}
	for name := range h {
		if strings.HasPrefix(name, "X-Litellm-") {
			assert.Contains(t, []string{proxypolicy.HeaderEndUserID, proxypolicy.HeaderSpendLogsMetadata}, name)
		}
	}
	assert.Empty(t, h.Get("X-Custom"), "headers off the allowlist are dropped")

	recs := auditN(t, p, 1)
	require.Len(t, recs, 1)
	r := recs[0]
	assert.Equal(t, "run-hdr", r.RunID)
	assert.Equal(t, 1, r.Attempt)
	assert.Equal(t, http.MethodPost, r.Method)
	assert.Equal(t, "/v1/chat/completions", r.Path)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.EqualValues(t, len(chatRequest), r.ReqBytes)
	assert.EqualValues(t, len(completionBody), r.RespBytes)
	assert.Equal(t, "gpt-test", r.Model)
	assert.False(t, r.Streamed)
	assert.Equal(t, "call-0001", r.CallID)
	assert.Equal(t, "chatcmpl-abc123", r.RequestID)
	assert.Equal(t, "0.000123", r.ResponseCost)
	assert.Empty(t, r.Blocked)
	assert.Empty(t, r.Error)
	assert.Positive(t, r.Latency)
	assert.LessOrEqual(t, r.TTFB, r.Latency)
	raw, _ := json.Marshal(recs)
	assert.NotContains(t, string(raw), "the prompt must never be audited")
	assert.NotContains(t, string(raw), testKey)
}

func TestBareOpenAIPathsAreForwardedUnderV1(t *testing.T) {
	up := newUpstream(t)
	m, _ := newManager(t)
	p := start(t, m, testSpec("run-bare", up.URL+"/litellm"))
	c := client(p)
	resp, _ := post(t, c, "/chat/completions", chatRequest, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = get(t, c, "/models?limit=2")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	reqs := up.requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, "/litellm/v1/chat/completions", reqs[0].Path, "the upstream's base path is kept")
	assert.Equal(t, "/litellm/v1/models", reqs[1].Path, "query parameters are dropped")
	assert.Equal(t, "/v1/models", auditN(t, p, 2)[1].Path)
}

func TestHealthAndUpgrade(t *testing.T) {
	up := newUpstream(t)
	m, _ := newManager(t)
	p := start(t, m, testSpec("run-health", up.URL))
	c := client(p)

	resp, body := get(t, c, "/health")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.JSONEq(t, `{"status":"ok","run_id":"run-health"}`, body)

	// Paths and routes are the engine suite's (llmproxytest).
	resp, _ = post(t, c, "/v1/chat/completions", "{}", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"})
	assert.Equal(t, http.StatusNotImplemented, resp.StatusCode)
	assert.Empty(t, up.requests(), "nothing refused reaches the upstream")

	recs := auditN(t, p, 1)
	require.Len(t, recs, 1, "health checks are not calls; refused calls are audited")
	assert.Equal(t, "upgrade_refused", recs[0].Blocked)
}

// TestSSEChunksAreNotBuffered makes the upstream send chunk k+1 only after the client
// has read chunk k: any buffering in the proxy deadlocks the exchange, and the request
// context ends the test with an error.
func TestSSEChunksAreNotBuffered(t *testing.T) {
	const chunks = 5
	up := newUpstream(t)
	seen := make(chan int)
	up.setRoute(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("x-litellm-call-id", "call-sse")
		w.WriteHeader(http.StatusOK)
		for k := range chunks {
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-sse\",\"choices\":[{\"delta\":{\"content\":\"tok%d\"}}],\"usage\":null}\n\n", k)
			w.(http.Flusher).Flush()
			select {
			case got := <-seen:
				if got != k {
					return
				}
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "data: {\"id\":\"chatcmpl-sse\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":5,\"total_tokens\":10}}\n\ndata: [DONE]\n\n")
	})
	m, _ := newManager(t)
	p := start(t, m, testSpec("run-sse", up.URL))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x/v1/chat/completions", strings.NewReader(`{"model":"gpt-test","stream":true,"messages":[]}`))
	resp, err := client(p).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	br := bufio.NewReader(resp.Body)
	for k := range chunks {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "chunk %d", k)
		assert.Contains(t, line, fmt.Sprintf(`"content":"tok%d"`, k))
		blank, err := br.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "\n", blank)
		select {
		case seen <- k:
		case <-ctx.Done():
			t.Fatalf("upstream gone at chunk %d", k)
		}
	}
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(rest), "data: [DONE]\n\n"))
	resp.Body.Close()

	recs := auditN(t, p, 1)
	require.Len(t, recs, 1)
	assert.True(t, recs[0].Streamed)
	assert.Equal(t, "chatcmpl-sse", recs[0].RequestID)
	assert.Equal(t, "call-sse", recs[0].CallID)
	assert.Equal(t, "gpt-test", recs[0].Model)
	assert.Empty(t, recs[0].Error)
	assert.EqualValues(t, 10, p.meter.Stats().Tokens, "the usage chunk counts against the token budget")
}

func TestRequestTooLarge(t *testing.T) {
	up := newUpstream(t)
	m, _ := newManager(t, WithMaxRequestBytes(100))
	p := start(t, m, testSpec("run-large", up.URL))
	resp, body := post(t, client(p), "/v1/chat/completions", strings.Repeat("x", 101), nil)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	assert.Contains(t, body, "invalid_request_error")
	assert.Empty(t, up.requests())
	assert.Equal(t, "request_too_large", auditN(t, p, 1)[0].Blocked)
}

func TestRunsHaveDistinctDirectories(t *testing.T) {
	up := newUpstream(t)
	m, base := newManager(t)
	p1 := start(t, m, testSpec("run-a", up.URL))
	p2 := start(t, m, testSpec("run-a", up.URL)) // even the same run id
	p3 := start(t, m, testSpec("run-b", up.URL))
	dirs := map[string]bool{p1.Socket().HostDir: true, p2.Socket().HostDir: true, p3.Socket().HostDir: true}
	assert.Len(t, dirs, 3)
	for _, p := range []*Proxy{p1, p2, p3} {
		s := p.Socket()
		assert.Empty(t, s.Volume)
		assert.Equal(t, filepath.Join(base, "test"), filepath.Dir(s.HostDir))
		assert.True(t, strings.HasPrefix(filepath.Base(s.HostDir), p.RunID()+"-"))
		fi, err := os.Stat(s.HostDir)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o711), fi.Mode().Perm(), "traversable, not listable")
		fi, err = os.Stat(filepath.Join(s.HostDir, port.LLMSocketName))
		require.NoError(t, err)
		assert.Equal(t, os.ModeSocket, fi.Mode().Type())
		assert.Equal(t, os.FileMode(0o666), fi.Mode().Perm())
		entries, err := os.ReadDir(s.HostDir)
		require.NoError(t, err)
		require.Len(t, entries, 1, "only the socket is in the mounted directory")
		var mk marker
		b, err := os.ReadFile(s.HostDir + ".json")
		require.NoError(t, err, "the marker sits next to the directory")
		require.NoError(t, json.Unmarshal(b, &mk))
		assert.Equal(t, p.RunID(), mk.Labels[port.LabelRunID])
		assert.Equal(t, "test", mk.Labels[port.LabelOwner])
		assert.Equal(t, port.KindProxy, mk.Labels[port.LabelKind])
		assert.NotContains(t, string(b), testKey)

		_, body := get(t, client(p), "/health")
		assert.JSONEq(t, fmt.Sprintf(`{"status":"ok","run_id":%q}`, p.RunID()), body)
	}
	fi, err := os.Stat(filepath.Join(base, "test"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
}

func TestLongRunIDIsShortenedInTheDirName(t *testing.T) {
	up := newUpstream(t)
	m, _ := newManager(t)
	id := strings.Repeat("r", port.MaxRunIDLen)
	p := start(t, m, testSpec(id, up.URL))
	assert.LessOrEqual(t, len(p.SocketPath()), maxSocketPath)
	_, body := get(t, client(p), "/health")
	assert.JSONEq(t, fmt.Sprintf(`{"status":"ok","run_id":%q}`, id), body)
}

func TestStopRemovesFilesAndReturnsRecords(t *testing.T) {
	up := newUpstream(t)
	m, _ := newManager(t)
	p := start(t, m, testSpec("run-stop", up.URL))
	c := client(p)
	post(t, c, "/v1/chat/completions", chatRequest, nil)
	get(t, c, "/nope")
	dir := p.Socket().HostDir

	recs, err := p.Stop(context.Background())
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Equal(t, "chatcmpl-abc123", recs[0].RequestID)
	assert.Equal(t, "route_not_allowed", recs[1].Blocked)
	assert.NoDirExists(t, dir)
	assert.NoFileExists(t, dir+".json")

	again, err := p.Stop(context.Background())
	require.NoError(t, err)
	assert.Equal(t, recs, again, "Stop is idempotent")
	assert.Equal(t, recs, p.Audit())

	_, err = net.Dial("unix", filepath.Join(dir, port.LLMSocketName))
	assert.Error(t, err, "nothing listens after Stop")
}

func TestStopCutsStreamsAfterContext(t *testing.T) {
	up := newUpstream(t)
	started := make(chan struct{})
	up.setRoute(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"id\":\"chatcmpl-long\"}\n\n")
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done() // a stream that never ends by itself
	})
	m, _ := newManager(t)
	p := start(t, m, testSpec("run-cut", up.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := client(p).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	<-started

	stopCtx, stopCancel := context.WithCancel(context.Background())
	stopCancel() // no patience at all: in-flight calls are cut at once
	recs, err := p.Stop(stopCtx)
	require.NoError(t, err)
	require.Len(t, recs, 1, "the cut call is still recorded")
	assert.Equal(t, "chatcmpl-long", recs[0].RequestID)
	assert.NotEmpty(t, recs[0].Error)
	_, err = io.ReadAll(resp.Body)
	assert.Error(t, err, "the client sees the stream cut, not a clean end")
}

func TestUpstreamDiesMidStream(t *testing.T) {
	up := newUpstream(t)
	up.setRoute(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"id\":\"chatcmpl-dying\",\"choices\":[]}\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // the upstream process dies: the chunked body never ends
		}
	})
	m, _ := newManager(t)
	p := start(t, m, testSpec("run-die", up.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := client(p).Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Error(t, err, "the client must see an error, not a clean end of stream")
	assert.NoError(t, ctx.Err(), "and must see it without waiting for a timeout")
	assert.Contains(t, string(b), "chatcmpl-dying", "what arrived before the cut was delivered")

	recs := auditN(t, p, 1)
	require.Len(t, recs, 1)
	assert.Contains(t, recs[0].Error, "upstream response cut")
	assert.Equal(t, "chatcmpl-dying", recs[0].RequestID)
	assert.True(t, recs[0].Streamed)
}

func TestUpstreamUnreachable(t *testing.T) {
	up := newUpstream(t)
	url := up.URL
	up.Close()
	m, _ := newManager(t)
	p := start(t, m, testSpec("run-down", url))
	resp, body := post(t, client(p), "/v1/chat/completions", chatRequest, nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	var e apiError
	require.NoError(t, json.Unmarshal([]byte(body), &e))
	assert.Equal(t, "upstream_error", e.Error.Type)
	recs := auditN(t, p, 1)
	require.Len(t, recs, 1)
	assert.Equal(t, http.StatusBadGateway, recs[0].Status)
	assert.Contains(t, recs[0].Error, "upstream: ")
	assert.Contains(t, recs[0].Error, "refused")
	assert.Equal(t, "gpt-test", recs[0].Model, "the body is read (bounded) before the upstream is dialled")
}

func TestStreamErrorEventIsRecorded(t *testing.T) {
	up := newUpstream(t)
	up.setRoute(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		io.WriteString(w, "data: {\"error\":{\"message\":\"quoting the prompt\",\"type\":\"rate_limit_error\",\"code\":\"429\"}}\n\n")
	})
	m, _ := newManager(t)
	p := start(t, m, testSpec("run-err-event", up.URL))
	resp, _ := post(t, client(p), "/v1/chat/completions", `{"model":"m","stream":true}`, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	recs := auditN(t, p, 1)
	require.Len(t, recs, 1)
	assert.Equal(t, "upstream error event (type=rate_limit_error, code=429)", recs[0].Error)
}

func TestBadSpecsCreateNothing(t *testing.T) {
	good := testSpec("run-ok", "http://127.0.0.1:4000")
	cases := map[string]func(s *port.ProxySpec){
		"empty run id":       func(s *port.ProxySpec) { s.RunID = "" },
		"run id with slash":  func(s *port.ProxySpec) { s.RunID = "../etc" },
		"crlf in billing":    func(s *port.ProxySpec) { s.Attribution.BillingAccountID = "a\r\nX-Evil: 1" },
		"crlf in session":    func(s *port.ProxySpec) { s.Attribution.SessionID = "s\n" },
		"no billing account": func(s *port.ProxySpec) { s.Attribution.BillingAccountID = "" },
		"no key":             func(s *port.ProxySpec) { s.APIKey = "" },
		"key with newline":   func(s *port.ProxySpec) { s.APIKey = "sk\nx" },
		"ftp upstream":       func(s *port.ProxySpec) { s.Upstream = "ftp://127.0.0.1/" },
		"no scheme":          func(s *port.ProxySpec) { s.Upstream = "127.0.0.1:4000" },
		"empty upstream":     func(s *port.ProxySpec) { s.Upstream = "" },
		"userinfo":           func(s *port.ProxySpec) { s.Upstream = "http://user:pw@127.0.0.1:4000" },
		"query":              func(s *port.ProxySpec) { s.Upstream = "http://127.0.0.1:4000/?key=x" },
		"fragment":           func(s *port.ProxySpec) { s.Upstream = "http://127.0.0.1:4000/#x" },
		"unparsable":         func(s *port.ProxySpec) { s.Upstream = "http://[::1" },
		"negative calls":     func(s *port.ProxySpec) { s.Budget.MaxCalls = -1 },
		"negative tokens":    func(s *port.ProxySpec) { s.Budget.MaxTokens = -1 },
		"reserved label":     func(s *port.ProxySpec) { s.Labels = map[string]string{port.LabelOwner: "x"} },
	}
	base := shortTempDir(t)
	m, err := NewManager(WithBaseDir(filepath.Join(base, "sub")))
	require.NoError(t, err)
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			s := good
			mutate(&s)
			p, err := m.Start(context.Background(), s)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.ErrorIs(t, err, port.ErrInvalidSpec)
			var oe *port.OpError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, "inproc.Start", oe.Op)
		})
	}
	assert.NoDirExists(t, filepath.Join(base, "sub"), "nothing was created")
}

func TestNewRejectsBadOptions(t *testing.T) {
	cases := map[string]Option{
		"relative base":  WithBaseDir("relative/dir"),
		"long base":      WithBaseDir("/" + strings.Repeat("b", 100)),
		"bad owner":      WithOwner("no/slash"),
		"nil logger":     WithLogger(nil),
		"nil transport":  WithTransport(nil),
		"negative uid":   WithSandboxUID(-1),
		"zero body size": WithMaxRequestBytes(0),
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := NewManager(o)
			assert.Nil(t, m)
			assert.ErrorIs(t, err, port.ErrInvalidSpec)
		})
	}
}

func TestUnsafeBaseDirIsRefused(t *testing.T) {
	base := shortTempDir(t)
	require.NoError(t, os.Chmod(base, 0o777))
	m, err := NewManager(WithBaseDir(base))
	require.NoError(t, err)
	_, err = m.Start(context.Background(), testSpec("run-x", "http://127.0.0.1:1"))
	require.ErrorIs(t, err, port.ErrInternal)
	assert.Contains(t, err.Error(), "writable by other users")
}

func TestPeerCredentialCheck(t *testing.T) {
	if !peerCredSupported {
		t.Skip("SO_PEERCRED is Linux only")
	}
	dir := shortTempDir(t)
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	require.NoError(t, err)
	defer ln.Close()
	p := &Proxy{log: discardLogger()}
	me := os.Geteuid()

	accept := func(allowed [2]int) error {
		pl := &peerListener{Listener: ln, p: p, allowed: allowed}
		got := make(chan error, 1)
		go func() {
			c, err := pl.Accept()
			got <- err // before the close below, which the client sees as EOF
			if err == nil {
				c.Close()
			}
		}()
		c, err := net.Dial("unix", filepath.Join(dir, "s"))
		require.NoError(t, err)
		defer c.Close()
		buf := make([]byte, 1)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, rerr := c.Read(buf) // refused peers are disconnected: EOF
		if !errors.Is(rerr, io.EOF) {
			return fmt.Errorf("read: %v", rerr)
		}
		select {
		case err := <-got:
			return err
		default:
			return errors.New("refused") // Accept is still waiting for an allowed peer
		}
	}
	assert.NoError(t, accept([2]int{4242, me}), "our own uid is allowed")
	assert.EqualError(t, accept([2]int{4242, 4243}), "refused")
	p.mu.Lock()
	assert.Equal(t, 1, p.rejectedPeers)
	p.mu.Unlock()
}

func TestManagerWithSandboxUIDServes(t *testing.T) {
	if !peerCredSupported {
		t.Skip("SO_PEERCRED is Linux only")
	}
	up := newUpstream(t)
	m, _ := newManager(t, WithSandboxUID(1001))
	p := start(t, m, testSpec("run-uid", up.URL))
	resp, _ := post(t, client(p), "/v1/chat/completions", chatRequest, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the host's own uid may connect")
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// auditN waits until p has at least n records and returns them. A client can finish
// reading a response a moment before the proxy's handler stores its record.
func auditN(t testing.TB, p *Proxy, n int) []port.AuditRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs := p.Audit()
		if len(recs) >= n || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(time.Millisecond)
	}
}
