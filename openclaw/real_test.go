package openclaw_test

// Tests against the real OpenClaw CLI. They need OPENCLAW_BIN, a launcher that
// runs the pinned openclaw with Node 24: eval "$(scripts/install-openclaw.sh)".
// Every run gets its own config, state and home directories under t.TempDir and
// talks only to loopback: the LLM is a fake OpenAI-compatible server.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

func needOpenClaw(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("OPENCLAW_BIN")
	testenv.Need(t, "openclaw", bin != "", `OPENCLAW_BIN is not set (eval "$(scripts/install-openclaw.sh)" && export OPENCLAW_BIN)`)
	return bin
}

// cliTmp is the CLI's temporary directory for this package's tests: the launcher keeps
// its compile cache there (shared by the tests, removed after them, never left in the
// host's /tmp).
var cliTmp string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "openclaw-cli-tmp-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cliTmp = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// cliEnv is a minimal environment: nothing from the test process leaks in, as in
// a sandbox.
func cliEnv(extra map[string]string) []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + cliTmp}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// validate runs `openclaw config validate --json` on the file.
func validate(t *testing.T, bin, file string) (valid bool, out map[string]any) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin, "config", "validate", "--json")
	cmd.Env = cliEnv(map[string]string{
		"OPENCLAW_CONFIG_PATH":     file,
		"OPENCLAW_STATE_DIR":       filepath.Join(dir, "state"),
		"HOME":                     filepath.Join(dir, "home"),
		"OPENCLAW_CONFIG_READONLY": "1",
		"OPENCLAW_NO_AUTO_UPDATE":  "1",
		"NO_COLOR":                 "1",
	})
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "validate printed no JSON; stderr: %s", stderr.String())
	valid, _ = out["valid"].(bool)
	assert.Equal(t, valid, err == nil, "exit status agrees with valid; stderr: %s", stderr.String())
	return valid, out
}

func TestConfigValidatesWithRealCLI(t *testing.T) {
	bin := needOpenClaw(t)
	for name, opts := range configCases(t) {
		t.Run(name, func(t *testing.T) {
			cfg, err := openclaw.NewConfig(opts...)
			require.NoError(t, err)
			file := filepath.Join(t.TempDir(), "openclaw.json")
			require.NoError(t, cfg.WriteFile(file))
			valid, out := validate(t, bin, file)
			assert.True(t, valid, "openclaw rejected the config: %v", out)
			assert.Equal(t, []any{}, out["warnings"], "no warnings (e.g. legacy keys)")
		})
	}

	// The validator is strict: the same config with one unknown key is refused,
	// so the checks above prove something.
	t.Run("control-unknown-key", func(t *testing.T) {
		cfg, err := openclaw.NewConfig(configCases(t)["sandbox"]...)
		require.NoError(t, err)
		var tree map[string]any
		require.NoError(t, json.Unmarshal(cfg.JSON(), &tree))
		tree["tools"].(map[string]any)["outboundHeaders"] = map[string]any{"x": "y"}
		b, err := json.Marshal(tree)
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), "openclaw.json")
		require.NoError(t, os.WriteFile(file, b, 0o644))
		valid, out := validate(t, bin, file)
		assert.False(t, valid)
		assert.Contains(t, fmt.Sprint(out["issues"]), "outboundHeaders")
	})
}

// fakeLLM is an OpenAI-compatible chat completions server. It answers
// "ANSWER-<marker>" for the MARKER=<marker> in the request (anywhere: OpenClaw
// wraps the user message), rejects requests containing MODE=REJECT with a
// LiteLLM-style 400, and holds requests containing MODE=HANG until the client
// gives up.
type fakeLLM struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
	hung   chan string // receives the body of each MODE=HANG request
}

var markerRE = regexp.MustCompile(`MARKER=([A-Z]+)`)

func newFakeLLM(t *testing.T) *fakeLLM {
	f := &fakeLLM{hung: make(chan string, 16)}
	done := make(chan struct{})
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error","code":"404"}}`, http.StatusNotFound)
			return
		}
		f.mu.Lock()
		f.bodies = append(f.bodies, string(body))
		f.mu.Unlock()
		switch {
		case bytes.Contains(body, []byte("MODE=HANG")):
			select {
			case f.hung <- string(body):
			default: // nobody is waiting for this one
			}
			select {
			case <-r.Context().Done():
			case <-done:
			}
			return
		case bytes.Contains(body, []byte("MODE=REJECT")):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"message":"model not allowed for this key","type":"invalid_request_error","param":null,"code":"400"}}`)
			return
		}
		answer := "CONFUSED"
		if m := markerRE.FindAllSubmatch(body, -1); len(m) > 0 {
			answer = "ANSWER-" + string(m[len(m)-1][1])
		}
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		_ = json.Unmarshal(body, &req)
		usage := map[string]any{"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": answer}}},
				"usage":   usage,
			})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(v any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", b)
			w.(http.Flusher).Flush()
		}
		chunk := func(delta map[string]any, finish any) map[string]any {
			return map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		}
		send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
		send(chunk(map[string]any{"content": answer}, nil))
		send(chunk(map[string]any{}, "stop"))
		send(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": req.Model, "choices": []any{}, "usage": usage})
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(f.Close)
	t.Cleanup(func() { close(done) }) // runs first: releases hung handlers
	return f
}

func (f *fakeLLM) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.bodies...)
}

// oneShotRun is a prepared one-shot in a host temp dir, run directly on the host
// with the one-shot's argv and environment (the workspace is the host dir).
type oneShotRun struct {
	ws   string
	argv []string
	env  map[string]string
}

func prepareOneShot(t *testing.T, bin string, llm *fakeLLM, files openclaw.Files, prompt string, timeout time.Duration) *oneShotRun {
	t.Helper()
	ws := t.TempDir()
	models := testModels(t)
	cfg, err := openclaw.NewConfig(openclaw.WithModels(models[0]), openclaw.WithBaseURL(llm.URL+"/v1"), openclaw.WithWorkspace(ws))
	require.NoError(t, err)
	o := openclaw.OneShot{SessionID: "run-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), Timeout: timeout, Command: []string{bin}, Workspace: ws}
	require.NoError(t, o.Prepare(ws, cfg, files, prompt))
	argv, err := o.Argv()
	require.NoError(t, err)
	return &oneShotRun{ws: ws, argv: argv, env: o.Env()}
}

func (r *oneShotRun) command(ctx context.Context) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, r.argv[0], r.argv[1:]...)
	cmd.Env = cliEnv(r.env)
	cmd.Dir = r.ws
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()) // as a shell (and a container runtime) reports it
	}
	return ee.ExitCode()
}

func (r *oneShotRun) run(t *testing.T) (int, []byte, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hung CLI must not hang the suite
	defer cancel()
	cmd, stdout, stderr := r.command(ctx)
	err := cmd.Run()
	return exitCode(t, err), stdout.Bytes(), stderr.Bytes()
}

// recordFixture stores a real envelope in testdata/envelopes when -update is set,
// with the temp workspace path replaced so fixtures are stable.
func recordFixture(t *testing.T, name, ws string, stdout []byte) {
	t.Helper()
	if !*update {
		return
	}
	b := bytes.ReplaceAll(stdout, []byte(ws), []byte(port.WorkspacePath))
	require.NoError(t, os.MkdirAll(filepath.Join("testdata", "envelopes"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join("testdata", "envelopes", name), b, 0o644))
}

func TestOneShotRealCLI(t *testing.T) {
	bin := needOpenClaw(t)
	llm := newFakeLLM(t)

	t.Run("success", func(t *testing.T) {
		// Quotes, $(...), backticks and newlines: the prompt reaches the model
		// verbatim because it never passes through a shell.
		prompt := "MARKER=SHELLSAFE please answer.\n`id` $(touch pwned) \"double\" 'single' ; rm -rf / #\nsecond line"
		files := openclaw.Files{Agents: "Follow AGENTSMARK rules.", Soul: "Be SOULMARK.", Tools: "Use TOOLSMARK carefully."}
		r := prepareOneShot(t, bin, llm, files, prompt, 120*time.Second)
		before := len(llm.requests())
		code, stdout, stderr := r.run(t)
		recordFixture(t, "success.exit0.json", r.ws, stdout)

		res, err := openclaw.ParseResult(code, stdout, stderr)
		require.NoError(t, err, "stderr: %s", stderr)
		assert.Equal(t, 0, code)
		assert.Equal(t, "ANSWER-SHELLSAFE", res.Text())
		assert.Equal(t, "litellm", res.Meta.AgentMeta.Provider)
		assert.Equal(t, "gemini-2.5-flash", res.Meta.AgentMeta.Model)
		assert.Equal(t, openclaw.Usage{Input: 11, Output: 3, Total: 14}, res.Meta.AgentMeta.Usage)
		assert.Equal(t, "stop", res.Meta.StopReason)
		assert.NoFileExists(t, filepath.Join(r.ws, "pwned"))

		reqs := llm.requests()[before:]
		require.NotEmpty(t, reqs)
		var body struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		require.NoError(t, json.Unmarshal([]byte(reqs[0]), &body))
		var all strings.Builder
		for _, m := range body.Messages {
			var s string
			if json.Unmarshal(m.Content, &s) != nil {
				s = string(m.Content) // content parts
			}
			all.WriteString(s)
		}
		assert.Contains(t, all.String(), prompt, "the prompt arrives byte for byte")
		for _, mark := range []string{"AGENTSMARK", "SOULMARK", "TOOLSMARK"} {
			assert.Contains(t, reqs[0], mark, "workspace text reaches the system prompt")
		}
		// The config was not rewritten (OPENCLAW_CONFIG_READONLY) and state stayed
		// inside the one-shot directory.
		assert.DirExists(t, filepath.Join(r.ws, openclaw.OneShotDir, openclaw.StateDirName))
	})

	t.Run("llm-rejects", func(t *testing.T) {
		r := prepareOneShot(t, bin, llm, openclaw.Files{}, "MODE=REJECT hello", 120*time.Second)
		code, stdout, stderr := r.run(t)
		recordFixture(t, "cli-error.exit1.json", r.ws, stdout)
		res, err := openclaw.ParseResult(code, stdout, stderr)
		assert.Nil(t, res)
		assert.Equal(t, 1, code)
		var ce *openclaw.CLIError
		require.ErrorAs(t, err, &ce, "stdout: %s", stdout)
		assert.Equal(t, "cli_error", ce.Type)
		assert.Contains(t, ce.Message, "LLM request failed")
		assert.Contains(t, ce.Stderr, "The CLI command failed")
	})

	t.Run("agent-timeout", func(t *testing.T) {
		r := prepareOneShot(t, bin, llm, openclaw.Files{}, "MODE=HANG hello", 5*time.Second)
		code, stdout, stderr := r.run(t)
		recordFixture(t, "timeout.exit1.json", r.ws, stdout)
		res, err := openclaw.ParseResult(code, stdout, stderr)
		assert.Equal(t, 1, code)
		require.NotNil(t, res, "a timed-out turn still prints its result; stderr: %s", stderr)
		var ae *openclaw.AgentError
		require.ErrorAs(t, err, &ae)
		assert.True(t, ae.Timeout)
		assert.ErrorIs(t, err, port.ErrTimeout)
		assert.Equal(t, "incomplete_turn", ae.Kind)
		assert.Contains(t, ae.Message, "timed out")
		assert.Empty(t, res.Text(), "the error payload is not an answer")
	})

	t.Run("sigterm", func(t *testing.T) {
		r := prepareOneShot(t, bin, llm, openclaw.Files{}, "MODE=HANG SIGTERMCASE hello", 120*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd, stdout, stderr := r.command(ctx)
		require.NoError(t, cmd.Start())
		for inCall := false; !inCall; { // wait until this CLI is mid-call, as a stopped sandbox would be
			select {
			case body := <-llm.hung:
				inCall = strings.Contains(body, "SIGTERMCASE")
			case <-ctx.Done():
				t.Fatal("the CLI never called the LLM")
			}
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		code := exitCode(t, cmd.Wait())
		assert.Equal(t, 143, code)
		res, err := openclaw.ParseResult(code, stdout.Bytes(), stderr.Bytes())
		assert.Nil(t, res)
		var ee *openclaw.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, "SIGTERM", ee.Signal)
		assert.ErrorIs(t, err, openclaw.ErrInterrupted)
		assert.ErrorIs(t, err, openclaw.ErrNoEnvelope)
		assert.False(t, errors.Is(err, port.ErrOOMKilled))
	})
}
