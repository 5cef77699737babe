package gateway_test

// Tests against the real `openclaw gateway` process. They need OPENCLAW_BIN (a
// runnable openclaw launcher) and, when `node` on PATH is older than 24,
// NODE24_BIN; scripts/install-openclaw.sh provides both. The gateway gets its own
// config, state and home directories and talks only to loopback: its LLM
// provider is a fake OpenAI-compatible server started by the test.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/testenv"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
)

// realGateway is a running openclaw gateway owned by one test.
type realGateway struct {
	URL   string
	Token string
	log   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// markerRE finds the per-session marker the test puts in its messages.
var markerRE = regexp.MustCompile(`MARKER=([A-Z]+)`)

// fakeLLM is a minimal OpenAI-compatible chat completions server. It answers
// with "ANSWER-<marker>" for the marker found anywhere in the request (OpenClaw
// wraps the user message, so no position is assumed), streaming or not.
func fakeLLM(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error","code":"404"}}`, http.StatusNotFound)
			return
		}
		markers := map[string]bool{}
		for _, m := range markerRE.FindAllSubmatch(body, -1) {
			markers[string(m[1])] = true
		}
		answer := "CONFUSED"
		if len(markers) == 1 {
			for m := range markers {
				answer = "ANSWER-" + m
			}
		}
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		_ = json.Unmarshal(body, &req)
		id := fmt.Sprintf("chatcmpl-fake-%d", time.Now().UnixNano())
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
					"message": map[string]any{"role": "assistant", "content": answer}}},
				"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
			})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(delta map[string]any, finish any) {
			b, _ := json.Marshal(map[string]any{
				"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
			})
			fmt.Fprintf(w, "data: %s\n\n", b)
			w.(http.Flusher).Flush()
		}
		chunk(map[string]any{"role": "assistant", "content": ""}, nil)
		for _, part := range []string{answer[:len(answer)/2], answer[len(answer)/2:]} {
			chunk(map[string]any{"content": part}, nil)
		}
		chunk(map[string]any{}, "stop")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// gatewayConfig is the smallest config that starts offline on loopback with
// token auth, heartbeats and cron off, and one provider: the fake LLM.
func gatewayConfig(port int, token, llmURL string) map[string]any {
	return map[string]any{
		"gateway": map[string]any{
			"mode": "local", "bind": "loopback", "port": port,
			"auth": map[string]any{"mode": "token", "token": token},
		},
		"agents": map[string]any{"defaults": map[string]any{
			"heartbeat": map[string]any{"every": "0m"},
			"model":     map[string]any{"primary": "fake/fake-model"},
			"sandbox":   map[string]any{"mode": "off"},
		}},
		"models": map[string]any{
			"mode":           "replace",
			"catalogRefresh": map[string]any{"enabled": false},
			"providers": map[string]any{"fake": map[string]any{
				"baseUrl": llmURL + "/v1", "apiKey": "unused", "api": "openai-completions",
				"models": []any{map[string]any{
					"id": "fake-model", "name": "Fake", "reasoning": false, "input": []string{"text"},
					"cost":          map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
					"contextWindow": 32000, "maxTokens": 1024,
				}},
			}},
		},
		"update": map[string]any{"checkOnStart": false},
		"cron":   map[string]any{"enabled": false},
	}
}

// startRealGateway writes a config into a temp dir, starts `openclaw gateway`
// and waits until it completes a handshake.
func startRealGateway(t *testing.T, llmURL string) *realGateway {
	t.Helper()
	bin := os.Getenv("OPENCLAW_BIN")
	testenv.Need(t, "openclaw", bin != "", "OPENCLAW_BIN is not set (scripts/install-openclaw.sh installs openclaw and prints it)")

	dir := t.TempDir()
	for _, d := range []string{"state", "home", "tmp"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	port := freePort(t)
	gw := &realGateway{URL: fmt.Sprintf("ws://127.0.0.1:%d", port), Token: "test-" + strings.Repeat("k", 24), log: &syncBuffer{}}
	cfg, err := json.MarshalIndent(gatewayConfig(port, gw.Token, llmURL), "", "  ")
	require.NoError(t, err)
	cfgPath := filepath.Join(dir, "openclaw.json")
	require.NoError(t, os.WriteFile(cfgPath, cfg, 0o600))

	path := os.Getenv("PATH")
	if node := os.Getenv("NODE24_BIN"); node != "" {
		path = filepath.Dir(node) + string(os.PathListSeparator) + path // the launcher runs `node`
	}
	cmd := exec.Command(bin, "gateway", "--port", fmt.Sprint(port), "--bind", "loopback")
	cmd.Env = append(os.Environ(),
		"PATH="+path,
		"OPENCLAW_CONFIG_PATH="+cfgPath,
		"OPENCLAW_STATE_DIR="+filepath.Join(dir, "state"),
		"HOME="+filepath.Join(dir, "home"),
		"TMPDIR="+filepath.Join(dir, "tmp"),
		"OPENCLAW_DISABLE_BONJOUR=1",
		"OPENCLAW_NO_AUTO_UPDATE=1",
		"OPENCLAW_SKIP_CHANNELS=1",
	)
	cmd.Stdout, cmd.Stderr = gw.log, gw.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// SIGTERM lets the gateway stop its own helpers; SIGKILL the group we
		// created if it does not finish in time.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("openclaw gateway output:\n%s", gw.log.String())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for {
		c, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token), gateway.WithRetry(1, 0))
		if err == nil {
			_ = c.Close()
			return gw
		}
		select {
		case <-exited:
			t.Fatalf("openclaw gateway exited during start-up: %v\n%s", err, gw.log.String())
		case <-ctx.Done():
			t.Fatalf("openclaw gateway not ready: %v\n%s", err, gw.log.String())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func TestRealGateway(t *testing.T) {
	llm := fakeLLM(t)
	gw := startRealGateway(t, llm.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()

	t.Run("handshake", func(t *testing.T) {
		c, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token))
		require.NoError(t, err)
		defer c.Close()
		h := c.Hello()
		assert.Equal(t, 4, h.Protocol)
		assert.NotEmpty(t, h.Server.ConnID)
		assert.Positive(t, h.Policy.TickIntervalMs)
		assert.Positive(t, h.Policy.MaxPayload)
		for _, m := range []string{"agent", "agent.wait", "chat.abort", "sessions.patch"} {
			assert.True(t, h.HasMethod(m), "gateway offers %s", m)
		}
		assert.Equal(t, "operator", h.Auth.Role)
	})

	t.Run("wrong token", func(t *testing.T) {
		_, err := gateway.Dial(ctx, gw.URL, gateway.WithToken("not-the-token"))
		require.ErrorIs(t, err, gateway.ErrAuth)
		var ge *gateway.GatewayError
		require.ErrorAs(t, err, &ge)
		assert.Equal(t, gateway.DetailAuthTokenMismatch, ge.DetailCode)
	})

	t.Run("sessions.patch", func(t *testing.T) {
		c, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token))
		require.NoError(t, err)
		defer c.Close()
		res, err := c.SessionsPatch(ctx, "patch-test", gateway.SessionPatch{Model: "fake/fake-model"})
		require.NoError(t, err)
		assert.Equal(t, "agent:main:patch-test", res.Key)
		assert.Equal(t, "fake-model", res.Model)
	})

	t.Run("two sessions isolated", func(t *testing.T) {
		type outcome struct {
			res  *gateway.AgentResult
			seen []string
			err  error
		}
		run := func(marker string) outcome {
			c, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token))
			if err != nil {
				return outcome{err: err}
			}
			defer c.Close()
			r, err := c.Agent(ctx, gateway.AgentRequest{
				Message:    "Reply with the code word only. MARKER=" + marker,
				SessionKey: "isolation-" + strings.ToLower(marker),
				Timeout:    90 * time.Second,
			})
			if err != nil {
				return outcome{err: err}
			}
			var seen []string
			for u := range r.Updates(ctx) {
				seen = append(seen, u.Text, u.ErrorMessage, string(u.Data))
			}
			res, err := r.Wait(ctx)
			return outcome{res: res, seen: seen, err: err}
		}
		// An observer that starts no run: every event it gets is someone else's,
		// which proves the gateway broadcasts and the filter is what isolates.
		observer, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token))
		require.NoError(t, err)
		defer observer.Close()

		var wg sync.WaitGroup
		out := map[string]outcome{}
		var mu sync.Mutex
		for _, m := range []string{"ALPHA", "BRAVO"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := run(m)
				mu.Lock()
				out[m] = o
				mu.Unlock()
			}()
		}
		wg.Wait()
		assert.Positive(t, observer.ForeignEvents(), "the gateway broadcast the runs' events to a bystander")
		for mine, theirs := range map[string]string{"ALPHA": "BRAVO", "BRAVO": "ALPHA"} {
			o := out[mine]
			require.NoError(t, o.err, mine)
			assert.Equal(t, "ok", o.res.Status, mine)
			assert.Contains(t, o.res.Text, "ANSWER-"+mine)
			assert.NotContains(t, o.res.Text, theirs)
			assert.NotContains(t, o.res.Text, gateway.HeartbeatToken)
			assert.Equal(t, "ANSWER-"+mine, o.res.StreamedText, "chat deltas of the run are delivered")
			for _, s := range o.seen {
				assert.NotContains(t, s, "ANSWER-"+theirs, mine)
			}
		}
	})
}
