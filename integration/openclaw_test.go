package integration

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// The real `openclaw agent --local --json` in a network=none sandbox: its only way
// out is the bridge to the run's proxy, which forwards to the fake LiteLLM with the
// key and the run's attribution. Node comes from the image, the pinned OpenClaw
// package tree from a read-only mount (scripts/install-openclaw.sh installs both).
func TestOpenClawOneShotDocker(t *testing.T) { testOpenClawOneShot(t, dockerRunnerFor) }
func TestOpenClawOneShotContainerd(t *testing.T) {
	testOpenClawOneShot(t, containerdRunnerFor)
}

var oneShotMarker = regexp.MustCompile(`MARKER=([A-Z]+)`)

// markerReply answers "ANSWER-<marker>" for the marker found anywhere in the
// conversation: OpenClaw wraps the prompt, so no position is assumed.
func markerReply(req litellmtest.ChatRequest) litellmtest.Reply {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := oneShotMarker.FindStringSubmatch(req.Messages[i].Content); m != nil {
			return litellmtest.Reply{Content: "ANSWER-" + m[1], PromptTokens: 21, CompletionTokens: 4}
		}
	}
	return litellmtest.Reply{Content: "NO-MARKER"}
}

// openClawInstall returns the pinned OpenClaw install and its Node, or skips (fails
// in CI) when scripts/install-openclaw.sh has not provided them.
func openClawInstall(t testing.TB) (appDir, nodeBin string) {
	appDir, nodeBin = os.Getenv("OPENCLAW_DIR"), os.Getenv("NODE24_BIN")
	testenv.Need(t, "openclaw", appDir != "" && nodeBin != "",
		`OPENCLAW_DIR and NODE24_BIN are not set (eval "$(scripts/install-openclaw.sh)" && export OPENCLAW_DIR NODE24_BIN)`)
	return appDir, nodeBin
}

// openClawStack runs OpenClaw one-shot through the facade on one runtime.
type openClawStack struct {
	sb     *sandbox.Sandbox
	image  string
	appDir string
	cfg    *openclaw.Config // built from the fake LiteLLM's catalog
	// mounts and env are added to every run (a compile cache, say).
	mounts []port.Mount
	env    map[string]string
}

func newOpenClawStack(t testing.TB, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string), fake *litellmtest.Server) *openClawStack {
	t.Helper()
	appDir, nodeBin := openClawInstall(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin, func(ctx context.Context) (string, []byte, error) {
		return testimages.NodeArchive(ctx, nodeBin)
	})
	sb, lc := newStack(t, runner, fake)
	// The config's models are LiteLLM's catalog, as a host would build it.
	cfg := openClawConfig(ctx, t, lc)
	return &openClawStack{sb: sb, image: image, appDir: appDir, cfg: cfg}
}

// openClawConfig is the one-shot config the OpenClaw tests use: the models of the
// (fake) LiteLLM's catalog as a host would read them, gpt-4o-mini by default; opts add to it.
func openClawConfig(ctx context.Context, tb testing.TB, lc *litellm.Client, opts ...openclaw.Option) *openclaw.Config {
	tb.Helper()
	catalog, err := lc.Models(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	models, err := openclaw.ModelsFromLiteLLM(catalog)
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := openclaw.NewConfig(append([]openclaw.Option{openclaw.WithModels(models...), openclaw.WithDefaultModel("gpt-4o-mini"), openclaw.WithAgentTimeout(150 * time.Second)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// run prepares a fresh workspace and runs `openclaw agent --local --json` in a sandbox.
func (s *openClawStack) run(ctx context.Context, t testing.TB, runID string, attr port.Attribution, files openclaw.Files, prompt string, reconcile bool) (ws string, res *sandbox.Result, runErr error) {
	t.Helper()
	one := openclaw.OneShot{
		SessionID: runID,
		Timeout:   150 * time.Second,
		Command:   []string{testimages.NodeBinary, testimages.AppDir + "/node_modules/openclaw/openclaw.mjs"},
	}
	ws = newWorkspace(t)
	if err := one.Prepare(ws, s.cfg, files, prompt); err != nil {
		t.Fatal(err)
	}
	// Node and OpenClaw start in seconds; the limits leave room for a loaded CI machine
	// and OpenClaw's own memory use.
	spec := port.RunSpec{Limits: port.Limits{Timeout: 4 * time.Minute, MemoryBytes: 1 << 30}}
	if err := one.Apply(&spec); err != nil {
		t.Fatal(err)
	}
	maps.Copy(spec.Env, s.env)
	res, runErr = s.sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: s.image,
		Argv: spec.Argv, Env: spec.Env, WorkspaceDir: ws,
		Mounts:      append([]port.Mount{{Source: s.appDir, Target: testimages.AppDir}}, s.mounts...),
		Attribution: attr, Limits: spec.Limits, Reconcile: reconcile,
	})
	if res == nil || res.Run == nil {
		t.Fatalf("Run: %v", runErr)
	}
	return ws, res, runErr
}

func testOpenClawOneShot(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fake := litellmtest.NewServer(litellmtest.WithReply(markerReply))
	defer fake.Close()
	stack := newOpenClawStack(t, newRunner, fake)

	runID := sandboxtest.RunID("openclaw")
	attr := port.Attribution{BillingAccountID: "acct-openclaw", UserID: "user-1", GraphID: "graph-1"}
	prompt := "Reply with the code word. MARKER=SANDBOXED `id` $(touch /workspace/pwned) \"q\" 'q'"
	ws, res, runErr := stack.run(ctx, t, runID, attr, openclaw.Files{Agents: "You are a test agent. AGENTSMARK"}, prompt, true)
	out, err := openclaw.ParseRun(res.Run, runErr)
	if err != nil {
		t.Fatalf("openclaw: %v\nstdout: %s\nstderr: %s", err, tail(res.Run.Stdout), tail(res.Run.Stderr))
	}
	if got := out.Text(); got != "ANSWER-SANDBOXED" {
		t.Errorf("answer %q, want ANSWER-SANDBOXED", got)
	}
	if m := out.Meta.AgentMeta; m.Provider != openclaw.DefaultProvider || m.Model != "gpt-4o-mini" {
		t.Errorf("agent meta %+v", m)
	}
	if _, err := os.Stat(ws + "/pwned"); err == nil {
		t.Error("the prompt was run by a shell")
	}

	// At the upstream: every chat call carried the key and this run's attribution,
	// and the prompt arrived verbatim with the workspace instructions.
	var chats int
	for _, r := range fake.Requests() {
		if !strings.HasSuffix(r.Path, "/chat/completions") {
			continue
		}
		chats++
		if got := r.Header.Get("Authorization"); got != "Bearer "+fake.MasterKey() {
			t.Errorf("upstream saw Authorization %q", got)
		}
		if got := r.Header.Get("X-Litellm-End-User-Id"); got != attr.BillingAccountID {
			t.Errorf("upstream saw end user %q", got)
		}
		var md map[string]any
		if err := json.Unmarshal([]byte(r.Header.Get("X-Litellm-Spend-Logs-Metadata")), &md); err != nil || md["run_id"] != runID {
			t.Errorf("upstream saw spend metadata %q (%v)", r.Header.Get("X-Litellm-Spend-Logs-Metadata"), err)
		}
		var body struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(r.Body, &body)
		if body.Model != "gpt-4o-mini" {
			t.Errorf("upstream saw model %q", body.Model)
		}
		if !strings.Contains(string(r.Body), "AGENTSMARK") {
			t.Error("AGENTS.md did not reach the system prompt")
		}
		var all strings.Builder
		var msgs struct {
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(r.Body, &msgs)
		for _, m := range msgs.Messages {
			var s string
			if json.Unmarshal(m.Content, &s) != nil {
				s = string(m.Content)
			}
			all.WriteString(s)
		}
		if !strings.Contains(all.String(), prompt) {
			t.Error("the prompt did not arrive byte for byte")
		}
	}
	if chats == 0 {
		t.Fatal("no chat completion reached the upstream")
	}
	t.Logf("answer %q after %d LLM call(s); sandbox ran %v, OpenClaw's turn %v", out.Text(), chats, res.Run.Duration, out.Meta.Duration())

	// The proxy audited each call, and the bill is reconciled from LiteLLM's rows.
	if len(res.Audit) != chats {
		t.Errorf("audit has %d records, upstream saw %d calls", len(res.Audit), chats)
	}
	if res.Usage == nil || res.Usage.Total.Calls != chats || res.Usage.Total.PromptTokens != int64(21*chats) || res.Usage.Total.CompletionTokens != int64(4*chats) {
		t.Errorf("reconciled usage %+v for %d calls", res.Usage, chats)
	}

	// LiteLLM refusing the call (a LiteLLM-shaped 400) reaches the host as OpenClaw's
	// typed CLI error, with the refused call in the proxy's audit.
	fake.FailNext("/v1/chat/completions", 10, http.StatusBadRequest, litellmtest.ShapeProxy)
	_, res, runErr = stack.run(ctx, t, sandboxtest.RunID("openclaw-rejected"), attr, openclaw.Files{}, "MARKER=REJECTED hello", false)
	_, err = openclaw.ParseRun(res.Run, runErr)
	var ce *openclaw.CLIError
	if !errors.As(err, &ce) || ce.ExitCode != 1 || !strings.Contains(ce.Message, "LLM request failed") {
		t.Fatalf("a refused LLM call gave %v (exit %d)\nstdout: %s\nstderr: %s", err, res.Run.ExitCode, tail(res.Run.Stdout), tail(res.Run.Stderr))
	}
	if len(res.Audit) == 0 {
		t.Fatal("the refused call is not in the audit")
	}
	for _, rec := range res.Audit {
		if rec.Status != http.StatusBadRequest || rec.Path != "/v1/chat/completions" {
			t.Errorf("audit record %+v, want the upstream's 400", rec)
		}
	}
}

func tail(b []byte) string {
	const n = 3000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
