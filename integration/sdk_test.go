package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// llmSDKs returns the pinned OpenAI and Anthropic Node SDKs' install directory
// (OPENAI_SDK_DIR, else installed by scripts/install-openai-sdk.sh from the npm
// registry into the cache) and the Node 24 binary.
func llmSDKs(t testing.TB) (sdkDir, nodeBin string) {
	t.Helper()
	nodeBin = os.Getenv("NODE24_BIN")
	testenv.Need(t, "openclaw", nodeBin != "", `NODE24_BIN is not set (eval "$(scripts/install-openclaw.sh)" && export NODE24_BIN)`)
	if dir := os.Getenv("OPENAI_SDK_DIR"); dir != "" {
		return dir, nodeBin
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join("..", "scripts", "install-openai-sdk.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("installing the SDKs: %v\n%s", err, stderr.Bytes())
	}
	dir, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "OPENAI_SDK_DIR=")
	if !ok || !filepath.IsAbs(dir) {
		t.Fatalf("install-openai-sdk.sh printed %q", out)
	}
	return dir, nodeBin
}

func TestOfficialSDKsDocker(t *testing.T)     { testOfficialSDKs(t, dockerRunnerFor) }
func TestOfficialSDKsContainerd(t *testing.T) { testOfficialSDKs(t, containerdRunnerFor) }

// testOfficialSDKs runs the official openai and @anthropic-ai/sdk packages, unmodified
// and configured only by the sandbox's environment, in a real sandbox: models, chat,
// streamed chat with usage, embeddings, responses and Anthropic messages all pass
// through the run's proxy, and every billable call is reconciled against the
// (fake) LiteLLM's spend logs. The caller's own base URL and key variables lose to
// the library's.
func testOfficialSDKs(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	sdkDir, nodeBin := llmSDKs(t)
	runner, image := newRunner(t, testenv.Bridge(t), func(ctx context.Context) (string, []byte, error) {
		return testimages.NodeArchive(ctx, nodeBin)
	})
	// The runs' budget starts after the builds (see testNodeAgentImage).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(200 * time.Millisecond))
	defer fake.Close()
	sb, _ := newStack(t, runner, fake)

	agentDir := t.TempDir()
	script, err := os.ReadFile(filepath.Join("testdata", "sdk-agent.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(agentDir, "agent.cjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(agentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const canary = "sk-caller-canary-7f3a"
	res, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("sdk"), Image: image,
		Argv:         []string{testimages.NodeBinary, "/opt/agent/agent.cjs"},
		WorkspaceDir: newWorkspace(t), Model: "gpt-4o-mini",
		Env: map[string]string{
			"ANTHROPIC_MODEL": "claude-haiku",
			// The library's variables win: these never reach the SDKs.
			"OPENAI_BASE_URL": "http://198.51.100.1/v1", "OPENAI_API_KEY": canary, "ANTHROPIC_BASE_URL": "http://198.51.100.1",
		},
		Mounts: []port.Mount{
			{Source: sdkDir, Target: testimages.AppDir},
			{Source: agentDir, Target: "/opt/agent"},
		},
		Attribution: port.Attribution{BillingAccountID: "acct-sdk"},
		Limits:      port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 512 << 20},
		Reconcile:   true,
	})
	if err != nil {
		t.Fatalf("Run: %v (stdout %s, stderr %s)", err, stdout(res), stderr(res))
	}
	if res.Run.ExitCode != 0 {
		t.Fatalf("agent exit %d\nstdout: %s\nstderr: %s", res.Run.ExitCode, res.Run.Stdout, res.Run.Stderr)
	}
	ops := map[string]map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(res.Run.Stdout))
	for sc.Scan() {
		var v map[string]any
		if json.Unmarshal(sc.Bytes(), &v) == nil {
			ops[v["op"].(string)] = v
		}
	}
	if ids, _ := ops["models"]["ids"].([]any); len(ids) != len(litellmtest.DefaultModels) {
		t.Errorf("models: %v", ops["models"])
	}
	for _, op := range []string{"chat", "chat_stream", "embeddings", "responses", "anthropic_messages"} {
		v := ops[op]
		usage, _ := v["usage"].(map[string]any)
		if v == nil || v["error"] != nil || len(usage) == 0 {
			t.Errorf("%s: %v", op, v)
		}
	}
	if n, _ := ops["chat_stream"]["chunks"].(float64); n < 2 {
		t.Errorf("streamed chat came in %v chunks", n)
	}
	if n, _ := ops["embeddings"]["vectors"].(float64); n != 2 {
		t.Errorf("embeddings: %v", ops["embeddings"])
	}
	// Every call went through the proxy: the audit has them all, on the right paths.
	paths := map[string]int{}
	for _, a := range res.Audit {
		paths[a.Method+" "+a.Path]++
		if a.Status != 200 || a.Blocked != "" {
			t.Errorf("audit: %+v", a)
		}
	}
	for _, p := range []string{"GET /v1/models", "POST /v1/chat/completions", "POST /v1/embeddings", "POST /v1/responses", "POST /v1/messages"} {
		if paths[p] == 0 {
			t.Errorf("no %s in the audit %v", p, paths)
		}
	}
	// Each billable call (all but the model list) reconciled against its spend row.
	if res.Usage == nil || res.Usage.Total.Calls != 5 || len(res.Usage.Missing) != 0 || res.Usage.Total.TotalTokens == 0 {
		t.Errorf("usage %+v", res.Usage)
	}
	if strings.Contains(string(res.Run.Stdout)+string(res.Run.Stderr), canary) {
		t.Error("the caller's key variable reached the agent")
	}
	for _, r := range fake.Requests() {
		if strings.Contains(r.Header.Get("Authorization"), canary) {
			t.Error("the caller's key reached LiteLLM")
		}
	}
}

func stdout(res *sandbox.Result) string {
	if res == nil || res.Run == nil {
		return ""
	}
	return string(res.Run.Stdout)
}

func stderr(res *sandbox.Result) string {
	if res == nil || res.Run == nil {
		return ""
	}
	return string(res.Run.Stderr)
}
