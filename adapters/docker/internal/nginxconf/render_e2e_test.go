package nginxconf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// fakeUpstream plays LiteLLM: it records every request it gets and answers with
// LiteLLM's response headers. A streamed call sends chunk k+1 only after the client
// acknowledged chunk k, so a proxy that buffers makes the stream stall instead of pass.
type fakeUpstream struct {
	*httptest.Server
	acks chan int

	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	Method, URI, Host string
	Header            http.Header
}

const (
	chatBody   = `{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`
	streamN    = 3
	failBody   = `{"error":{"message":"boom","type":"internal_error","param":null,"code":"500"}}`
	notFound   = `{"error":{"message":"the LLM proxy serves /v1/... only","type":"not_found","param":null,"code":"404"}}` + "\n"
	badGateway = `{"error":{"message":"the LLM upstream could not be reached","type":"upstream_error","param":null,"code":"502"}}` + "\n"
)

func newFakeUpstream(t *testing.T) *fakeUpstream {
	u := &fakeUpstream{acks: make(chan int)}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *fakeUpstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

func (u *fakeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.seen = append(u.seen, seenRequest{Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header.Clone()})
	n := len(u.seen)
	u.mu.Unlock()

	h := w.Header()
	for k, v := range litellmtest.SharedKeyHeaders {
		h[k] = v
	}
	h.Set("X-Litellm-Model-Id", "deployment-1")
	h.Set("X-Litellm-Model-Group", "gpt-test")
	h.Set("X-Litellm-Key-Spend", "12.5")
	switch {
	case r.URL.Path == "/v1/embeddings":
		h.Set("X-Litellm-Call-Id", "call-fail")
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, failBody)
	case bytes.Contains(body, []byte(`"stream":true`)):
		h.Set("X-Litellm-Call-Id", "call-stream")
		h.Set("X-Litellm-Response-Cost", "0.0042")
		h.Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		for k := 0; k < streamN; k++ {
			fmt.Fprintf(w, "data: {\"k\":%d}\n\n", k)
			fl.Flush()
			select {
			case got := <-u.acks:
				if got != k {
					return
				}
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "data: [DONE]\n\n")
	default:
		h.Set("X-Litellm-Call-Id", "call-"+strconv.Itoa(n))
		h.Set("X-Litellm-Response-Cost", "0.000123")
		h.Set("X-Litellm-Key-Spend", "1234.5")
		h.Set("X-Litellm-Model-Api-Base", "http://10.0.0.7:8000/v1")
		h.Set("Content-Type", "application/json")
		io.WriteString(w, chatBody)
	}
}

// nginxProc is a host nginx running a rendered config as the current user, with every
// path in a temporary directory.
type nginxProc struct {
	cmd                    *exec.Cmd
	dir, sock, audit, conf string
	stderr                 *lockedBuffer
	done                   chan struct{}
	waitErr                error
	client                 *http.Client
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startNginx(t *testing.T, bin string, spec port.ProxySpec, cfg NginxConfig) *nginxProc {
	t.Helper()
	return startNginxEdited(t, bin, spec, cfg, nil)
}

// startNginxEdited starts nginx on the rendered configuration after edit (if any).
func startNginxEdited(t testing.TB, bin string, spec port.ProxySpec, cfg NginxConfig, edit func([]byte) []byte) *nginxProc {
	t.Helper()
	dir := t.TempDir()
	p := &nginxProc{
		dir: dir, sock: filepath.Join(dir, "llm.sock"), audit: filepath.Join(dir, "audit.log"),
		conf: filepath.Join(dir, "nginx.conf"), stderr: &lockedBuffer{}, done: make(chan struct{}),
	}
	cfg.Policy = mustPolicy(t, spec)
	cfg.Upstream = spec.Upstream
	cfg.SocketPath, cfg.AuditLogPath, cfg.RuntimeDir = p.sock, p.audit, dir
	cfg.ScriptPath = filepath.Join(dir, "llmproxy.js")
	require.NoError(t, os.WriteFile(cfg.ScriptPath, NginxScript(), 0o644))
	conf, err := RenderNginx(cfg)
	require.NoError(t, err)
	if edit != nil {
		conf = edit(conf)
	}
	require.NoError(t, os.WriteFile(p.conf, conf, 0o600))

	p.cmd = exec.Command(bin, append([]string{"-p", dir}, NginxArgs(p.conf)...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.stderr, p.stderr
	// Its own process group, so that no worker outlives the test (see stop).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, p.cmd.Start())
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(t) })

	p.client = &http.Client{
		Timeout: time.Minute, // a guard against a hang, not an assertion
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", p.sock)
			},
			DisableCompression: true,
		},
	}
	// Wait for the socket (nginx creates it before it forks workers).
	deadline := time.Now().Add(30 * time.Second)
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 200*time.Millisecond) {
		c, err := net.Dial("unix", p.sock)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-p.done:
			t.Fatalf("nginx exited: %v\n%s", p.waitErr, p.stderr)
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not open %s:\n%s", p.sock, p.stderr)
		}
	}
	return p
}

// workers lists the pids of the master's children (its worker processes).
func (p *nginxProc) workers(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses: state ppid ...
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(p.cmd.Process.Pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stop asks nginx for a graceful shutdown and waits for it.
func (p *nginxProc) stop(t testing.TB) {
	// Workers outlive a master that died: whatever is left of the group goes last.
	defer syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return
	default:
	}
	if p.client != nil {
		p.client.Transport.(*http.Transport).CloseIdleConnections()
	}
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("nginx did not stop on SIGQUIT:\n%s", p.stderr)
	}
}

func (p *nginxProc) do(t *testing.T, method, path string, body string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://llm"+path, rd)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := p.client.Do(req)
	require.NoError(t, err, "%s %s\n%s", method, path, p.stderr)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// raw sends a request line as written, for paths an HTTP client would clean up.
func (p *nginxProc) raw(t *testing.T, requestLine string) *http.Response {
	t.Helper()
	c, err := net.Dial("unix", p.sock)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, requestLine+"\r\nHost: llm\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestNginxEndToEnd(t *testing.T) {
	bin := testenv.NeedCommand(t, "nginx", "nginx")
	up := newFakeUpstream(t)
	upURL, err := url.Parse(up.URL)
	require.NoError(t, err)
	spec := port.ProxySpec{
		RunID: "run-e2e", Attempt: 3, Upstream: up.URL, APIKey: "sk-e2e-master",
		Attribution: port.Attribution{
			// '$' must arrive literally, never as an nginx variable; quotes, backslashes
			// and directive characters must arrive as they are.
			BillingAccountID: "acct-$host",
			UserID:           `u"$remote_addr\n`,
			GraphID:          "sandbox:agent",
			SessionID:        "s;{}#${x}",
		},
	}
	start := time.Now()
	px := startNginx(t, bin, spec, NginxConfig{MaxBodyBytes: 4096})

	fi, err := os.Stat(px.sock)
	require.NoError(t, err)
	assert.Equal(t, os.ModeSocket|0o666, fi.Mode(), "the sandbox user must be able to connect")

	// 1. A call with every spoofable header: only our values reach the upstream.
	spoof := http.Header{
		"Authorization":                 {"Bearer sk-stolen"},
		"X-Litellm-End-User-Id":         {"victim"},
		"X-Litellm-Spend-Logs-Metadata": {`{"run_id":"other-run"}`},
		"X-Litellm-Customer-Id":         {"victim"},
		"X-Litellm-Api-Key":             {"sk-other"},
		"X-Api-Key":                     {"sk-other"},
		"Api-Key":                       {"sk-other"},
		"Proxy-Authorization":           {"Basic eDp5"},
		"Cookie":                        {"session=victim"},
		"X-Pass-Authorization":          {"Bearer provider-key"},
		"Traceparent":                   {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		"Openai-Organization":           {"org-victim"},
		"Accept-Encoding":               {"gzip"},
		"Content-Type":                  {"application/json"},
		"Accept":                        {"application/json"},
		"User-Agent":                    {"e2e-agent/1.0"},
		"Openai-Beta":                   {"assistants=v2"},
	}
	reqBody := `{"model":"gpt-test","messages":[]}`
	resp, body := px.do(t, http.MethodPost, "/v1/chat/completions", reqBody, spoof)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, chatBody, body)
	assert.Equal(t, "call-1", resp.Header.Get("X-Litellm-Call-Id"), "the call id reaches the client")
	assert.Equal(t, "0.000123", resp.Header.Get("X-Litellm-Response-Cost"))
	assert.Equal(t, "deployment-1", resp.Header.Get("X-Litellm-Model-Id"))
	assert.Empty(t, resp.Header.Get("X-Litellm-Key-Spend"), "the shared key's spend is hidden")
	assert.Empty(t, resp.Header.Get("X-Litellm-Model-Api-Base"), "the deployment's address is hidden")
	// The shared key's rate limits and the provider's relayed headers LiteLLM sends
	// (litellmtest.SharedKeyHeaders) stay out of the sandbox, as on the Go fronts.
	for name, vals := range resp.Header {
		if strings.Contains(strings.Join(vals, ","), litellmtest.SharedKeyCanary) {
			t.Errorf("the shared key's header %s reached the client: %q", name, vals)
		}
	}

	seen := up.requests()
	require.Len(t, seen, 1)
	got := seen[0]
	assert.Equal(t, "/v1/chat/completions", got.URI)
	assert.Equal(t, upURL.Host, got.Host)
	var names []string
	for k := range got.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	assert.Equal(t, []string{
		"Accept", "Authorization", "Content-Length", "Content-Type", "Openai-Beta", "User-Agent",
		"X-Litellm-End-User-Id", "X-Litellm-Spend-Logs-Metadata",
	}, names, "exactly the allowlist and our headers arrive")
	assert.Equal(t, []string{"Bearer sk-e2e-master"}, got.Header.Values("Authorization"))
	assert.Equal(t, []string{"acct-$host"}, got.Header.Values("X-Litellm-End-User-Id"))
	require.Len(t, got.Header.Values("X-Litellm-Spend-Logs-Metadata"), 1)
	var md proxypolicy.SpendLogsMetadata
	require.NoError(t, json.Unmarshal([]byte(got.Header.Get("X-Litellm-Spend-Logs-Metadata")), &md))
	assert.Equal(t, proxypolicy.SpendLogsMetadata{
		RunID: "run-e2e", Attempt: 3, UserID: `u"$remote_addr\n`, GraphID: "sandbox:agent", SessionID: "s;{}#${x}",
	}, md)
	assert.Equal(t, "application/json", got.Header.Get("Content-Type"))
	assert.Equal(t, "e2e-agent/1.0", got.Header.Get("User-Agent"))
	assert.Equal(t, "assistants=v2", got.Header.Get("Openai-Beta"))
	assert.Equal(t, strconv.Itoa(len(reqBody)), got.Header.Get("Content-Length"))

	// 2. A bare OpenAI path goes to /v1/; no query string is forwarded (LiteLLM reads
	// parameters such as team_id from it).
	resp, _ = px.do(t, http.MethodGet, "/models?limit=2", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	seen = up.requests()
	require.Len(t, seen, 2)
	assert.Equal(t, "/v1/models", seen[1].URI)

	// 3. A stream arrives chunk by chunk: the upstream sends chunk k+1 only after the
	// client has read chunk k.
	streamReq, err := http.NewRequest(http.MethodPost, "http://llm/v1/chat/completions", strings.NewReader(`{"model":"gpt-test","stream":true}`))
	require.NoError(t, err)
	streamReq.Header.Set("Content-Type", "application/json")
	sresp, err := px.client.Do(streamReq)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, sresp.StatusCode)
	assert.Equal(t, "text/event-stream", sresp.Header.Get("Content-Type"))
	assert.Equal(t, "call-stream", sresp.Header.Get("X-Litellm-Call-Id"))
	br := bufio.NewReader(sresp.Body)
	var streamBytes int
	readEvent := func() string {
		t.Helper()
		var ev strings.Builder
		for {
			line, err := br.ReadString('\n')
			require.NoError(t, err, "stream cut after %q", ev.String())
			streamBytes += len(line)
			if line == "\n" {
				return ev.String()
			}
			ev.WriteString(line)
		}
	}
	for k := 0; k < streamN; k++ {
		require.Equal(t, fmt.Sprintf("data: {\"k\":%d}\n", k), readEvent())
		up.acks <- k
	}
	require.Equal(t, "data: [DONE]\n", readEvent())
	rest, err := io.ReadAll(sresp.Body)
	require.NoError(t, err)
	assert.Empty(t, rest)
	sresp.Body.Close()

	// 4. An upstream error passes through with its call id.
	resp, body = px.do(t, http.MethodPost, "/v1/embeddings", `{}`, http.Header{"Content-Type": {"application/json"}})
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.Equal(t, failBody, body)

	// 5. /health answers from nginx, is not audited and never reaches the upstream.
	resp, body = px.do(t, http.MethodGet, "/health", "", nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.JSONEq(t, `{"status":"ok","run_id":"run-e2e"}`, body)

	// 6. Everything else is a JSON 404 (or 405, 413), audited as blocked.
	resp, body = px.do(t, http.MethodGet, "/other", "", nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, notFound, body)
	for _, line := range []string{
		"GET /v1/../key/generate HTTP/1.1", "GET /v1/%2e%2e/spend/logs HTTP/1.1", "GET /v1 HTTP/1.1",
		// An attempt to forge an audit record through the logged path.
		`GET /x%22,%22status%22:%22200%22%7D%0A%7B%22run_id%22:%22run-e2e HTTP/1.1`,
	} {
		assert.Equal(t, http.StatusNotFound, px.raw(t, line).StatusCode, line)
	}
	// LiteLLM's admin and shared-resource APIs under /v1 are not inference routes.
	for _, line := range []string{
		"POST /v1/mcp/server HTTP/1.1", "GET /v1/model/info HTTP/1.1", "GET /v1%2Fkey/list HTTP/1.1",
	} {
		r := px.raw(t, line)
		assert.Equal(t, http.StatusNotFound, r.StatusCode, line)
	}
	// A path nginx would normalise into a route is refused, not normalised.
	for _, line := range []string{
		"POST /v1/chat//completions HTTP/1.1", "POST /v1/chat/%63ompletions HTTP/1.1", "GET /v1/models/a/../b HTTP/1.1",
	} {
		assert.Equal(t, http.StatusBadRequest, px.raw(t, line).StatusCode, line)
	}
	resp, _ = px.do(t, http.MethodPut, "/v1/chat/completions", `{}`, nil)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	resp, body = px.do(t, http.MethodPost, "/v1/chat/completions", strings.Repeat("x", 8192), nil)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	assert.Contains(t, body, "request body too large")

	var uris []string
	for _, r := range up.requests() {
		uris = append(uris, r.Method+" "+r.URI)
	}
	assert.Equal(t, []string{
		"POST /v1/chat/completions", "GET /v1/models", "POST /v1/chat/completions", "POST /v1/embeddings",
	}, uris, "refused requests never reach the upstream")

	// Stop cleanly: the master and its workers are gone, the pid file removed.
	workers := px.workers(t)
	require.NotEmpty(t, workers, "nginx runs worker processes")
	px.stop(t)
	require.NoError(t, px.waitErr, "nginx exit\n%s", px.stderr)
	for _, pid := range workers {
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
		assert.True(t, errors.Is(err, os.ErrNotExist), "worker %d left behind", pid)
	}
	_, err = os.Stat(filepath.Join(px.dir, "nginx.pid"))
	assert.True(t, errors.Is(err, os.ErrNotExist), "pid file removed")
	end := time.Now()

	// The audit log, parsed back.
	f, err := os.Open(px.audit)
	require.NoError(t, err)
	defer f.Close()
	a, err := ReadAudit(f, AuditLimits{})
	require.NoError(t, err)
	recs := a.Records
	require.Len(t, recs, 17, "one record per request except /health")
	for i, r := range recs {
		assert.False(t, r.Time.Before(start.Add(-time.Second)) || r.Time.After(end), "record %d time %v", i, r.Time)
		recs[i].Time, recs[i].Latency, recs[i].TTFB = time.Time{}, 0, 0
	}
	assert.Greater(t, recs[0].ReqBytes, int64(len(reqBody)), "request_length counts headers and body")
	// A stream is sent chunked; nginx counts the chunk framing as body: at most one
	// chunk per event plus the last.
	assert.GreaterOrEqual(t, recs[2].RespBytes, int64(streamBytes))
	assert.LessOrEqual(t, recs[2].RespBytes, int64(streamBytes+len("ff\r\n\r\n")*(streamN+1)+len("0\r\n\r\n")))
	for i := range recs {
		recs[i].ReqBytes = 0
	}
	base := port.AuditRecord{RunID: "run-e2e", Attempt: 3}
	rec := func(f func(*port.AuditRecord)) port.AuditRecord {
		r := base
		f(&r)
		return r
	}
	nf := int64(len(notFound))
	rna := int64(len(`{"error":{"message":"route_allowlist: the LLM proxy forwards inference routes only","type":"not_found","param":null,"code":"404"}}` + "\n"))
	cp := int64(len(`{"error":{"message":"canonical_path: the request path must be written in canonical form","type":"invalid_request_error","param":null,"code":"400"}}` + "\n"))
	want := []port.AuditRecord{
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes = "POST", "/v1/chat/completions", 200, int64(len(chatBody))
			r.CallID, r.ResponseCost, r.Model = "call-1", "0.000123", "gpt-test"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes = "GET", "/v1/models", 200, int64(len(chatBody))
			r.CallID, r.ResponseCost, r.Model = "call-2", "0.000123", "gpt-test"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes = "POST", "/v1/chat/completions", 200, recs[2].RespBytes
			r.CallID, r.ResponseCost, r.Model, r.Streamed = "call-stream", "0.0042", "gpt-test", true
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes = "POST", "/v1/embeddings", 500, int64(len(failBody))
			r.CallID, r.Model = "call-fail", "gpt-test"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "GET", "/other", 404, nf, "path_not_allowed"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "GET", "/key/generate", 404, nf, "path_not_allowed"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "GET", "/spend/logs", 404, nf, "path_not_allowed"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "GET", "/v1", 404, nf, "path_not_allowed"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "GET", `/x","status":"200"}%0A{"run_id":"run-e2e` /* the LF inert */, 404, nf, "path_not_allowed"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "POST", "/v1/mcp/server", 404, rna, "route_not_allowed"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "GET", "/v1/model/info", 404, rna, "route_not_allowed"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "GET", "/v1/key/list", 404, rna, "route_not_allowed"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "POST", "/v1/chat/completions", 400, cp, "canonical_path"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "POST", "/v1/chat/completions", 400, cp, "canonical_path"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.RespBytes, r.Blocked = "GET", "/v1/models/b", 400, cp, "canonical_path"
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.Blocked = "PUT", "/v1/chat/completions", 405, "method_not_allowed"
			r.RespBytes = int64(len(`{"error":{"message":"route_allowlist: method not allowed on this route","type":"invalid_request_error","param":null,"code":"405"}}` + "\n"))
		}),
		rec(func(r *port.AuditRecord) {
			r.Method, r.Path, r.Status, r.Blocked = "POST", "/v1/chat/completions", 413, "request_too_large"
			r.RespBytes = int64(len(`{"error":{"message":"request body too large","type":"invalid_request_error","param":null,"code":"413"}}` + "\n"))
		}),
	}
	assert.Equal(t, want, recs)

	raw, err := os.ReadFile(px.audit)
	require.NoError(t, err)
	for _, secret := range []string{"sk-e2e-master", "sk-stolen", "sk-other", "victim", "provider-key", "messages"} {
		assert.NotContains(t, string(raw), secret, "the audit log holds no header or body")
	}
	assert.NotContains(t, px.stderr.String(), "sk-e2e-master")
}

// TestNginxUpstreamDown: an unreachable upstream gives the client a JSON 502 and an
// audit record with the error.
func TestNginxUpstreamDown(t *testing.T) {
	bin := testenv.NeedCommand(t, "nginx", "nginx")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now

	spec := typicalSpec()
	spec.Upstream = "http://" + addr
	px := startNginx(t, bin, spec, NginxConfig{})
	resp, body := px.do(t, http.MethodPost, "/v1/chat/completions", `{}`, nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Equal(t, badGateway, body)
	px.stop(t)

	f, err := os.Open(px.audit)
	require.NoError(t, err)
	defer f.Close()
	a, err := ReadAudit(f, AuditLimits{})
	require.NoError(t, err)
	recs := a.Records
	require.Len(t, recs, 1)
	r := recs[0]
	assert.Equal(t, 502, r.Status)
	assert.Equal(t, "/v1/chat/completions", r.Path)
	assert.Equal(t, "upstream: could not be reached or failed before answering (upstream status 502)", r.Error)
	assert.Empty(t, r.CallID)
	assert.Empty(t, r.Blocked)
	assert.Equal(t, int64(len(badGateway)), r.RespBytes)
}

// TestNginxRefusedFloodBoundedLog: an agent flooding its proxy with refused requests
// makes it write a full line for a small early sample and a short tally line for every
// other one; forwarded calls still get full lines, and every refused request is counted.
func TestNginxRefusedFloodBoundedLog(t *testing.T) {
	bin := testenv.NeedCommand(t, "nginx", "nginx")
	up := newFakeUpstream(t)
	spec := typicalSpec()
	spec.Upstream = up.URL
	px := startNginx(t, bin, spec, NginxConfig{})

	const workers, each = 8, 1250
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				path := "/key/generate"
				if i%2 == 1 {
					path = "/v1/../spend/logs"
				}
				resp, err := px.client.Get("http://llm" + path)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("%s: %d", path, resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	resp, body := px.do(t, http.MethodPost, "/v1/chat/completions", `{"model":"gpt-test"}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	px.stop(t)

	fi, err := os.Stat(px.audit)
	require.NoError(t, err)
	// Full lines are about 550 bytes here; one per refused request would be 5.5 MB.
	const refused, maxFull = workers * each, 99 * 9
	assert.LessOrEqual(t, fi.Size(), int64(maxFull*700+refused*40), "audit log size")

	f, err := os.Open(px.audit)
	require.NoError(t, err)
	defer f.Close()
	a, err := ReadAudit(f, AuditLimits{})
	require.NoError(t, err)
	assert.Equal(t, refused, a.Refused, "every refused request is counted")
	assert.Zero(t, a.Dropped)
	require.NotEmpty(t, a.Records)
	assert.LessOrEqual(t, len(a.Records), maxFull+1)
	last := a.Records[len(a.Records)-1]
	assert.Equal(t, "call-1", last.CallID, "the forwarded call after the flood has its full record")
	for _, r := range a.Records[:len(a.Records)-1] {
		assert.Equal(t, "path_not_allowed", r.Blocked)
	}
	t.Logf("%d refused requests: %d bytes of log, %d full records", refused, fi.Size(), len(a.Records)-1)
}
