package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/preload"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestOpenClawOneShotPreloadedDocker: the real OpenClaw 2026.9.6 one-shot
// (`openclaw agent --local --json`) served by a pre-booted slot of a Docker warm pool
// through the facade (WithPool, Request.Preload): the OpenClaw preloader imported the
// CLI before the claim, with no config, state, workspace or LLM socket present; the
// run's turn reaches the fake LiteLLM through its own proxy and answers. Its boot
// overhead (wall time minus OpenClaw's reported turn) is logged. About 20-40 s.
func TestOpenClawOneShotPreloadedDocker(t *testing.T) {
	testOpenClawOneShotPreloaded(t, dockerRunnerFor)
}

// TestOpenClawOneShotPreloadedContainerd is TestOpenClawOneShotPreloadedDocker on
// containerd's warm pool. About 20-40 s.
func TestOpenClawOneShotPreloadedContainerd(t *testing.T) {
	testOpenClawOneShotPreloaded(t, containerdRunnerFor)
}

func testOpenClawOneShotPreloaded(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	appDir, nodeBin := openClawInstall(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fake := litellmtest.NewServer(litellmtest.WithReply(markerReply))
	defer fake.Close()
	bin, err := bridge.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	runner, image := newRunner(t, bin, func(ctx context.Context) (string, []byte, error) {
		return testimages.NodeArchive(ctx, nodeBin)
	})
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, preload.OpenClawName), preload.OpenClaw, 0o644); err != nil {
		t.Fatal(err)
	}
	pre := &port.Preload{
		Argv:   []string{testimages.NodeBinary, "/opt/preload/" + preload.OpenClawName, testimages.AppDir + "/node_modules/openclaw"},
		Mounts: []port.Mount{{Source: dir, Target: "/opt/preload"}, {Source: appDir, Target: testimages.AppDir}},
	}
	// The limit leaves room for a heavily loaded machine (a cold one-shot took 3 min at
	// load 40 on 2 vCPUs).
	limits := port.Limits{Timeout: 8 * time.Minute, MemoryBytes: 1 << 30}
	tmpl := port.TemplateOf(port.RunSpec{Image: image, WorkspaceDir: "/", LLM: &port.LLMSocket{HostDir: "/"}, Limits: limits, Preload: pre})
	pool, err := runner.(port.Pooler).WarmPool(ctx, tmpl, port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(context.Background())
	sb, lc := newStack(t, runner, fake, sandbox.WithPool(pool))
	catalog, err := lc.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	models, err := openclaw.ModelsFromLiteLLM(catalog)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := openclaw.NewConfig(openclaw.WithModels(models...), openclaw.WithDefaultModel("gpt-4o-mini"), openclaw.WithAgentTimeout(150*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Minute); pool.Stats().Ready < 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) || pool.Stats().PreloadFailed > 0 {
			t.Fatalf("the pre-booted slot never became ready: %+v", pool.Stats())
		}
	}

	runID := sandboxtest.RunID("openclaw-pre")
	one := openclaw.OneShot{SessionID: runID, Timeout: 150 * time.Second, Command: []string{testimages.NodeBinary, testimages.AppDir + "/node_modules/openclaw/openclaw.mjs"}}
	ws := newWorkspace(t)
	if err := one.Prepare(ws, cfg, openclaw.Files{Agents: "You are a test agent."}, "Reply with the code word. MARKER=PRELOADED"); err != nil {
		t.Fatal(err)
	}
	spec := port.RunSpec{Limits: limits}
	if err := one.Apply(&spec); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	res, runErr := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: image,
		Argv: spec.Argv, Env: spec.Env, WorkspaceDir: ws, Limits: spec.Limits, Preload: pre,
		Attribution: port.Attribution{BillingAccountID: "acct-pre"},
	})
	wall := time.Since(t0)
	if res == nil || res.Run == nil {
		t.Fatalf("Run: %v", runErr)
	}
	out, err := openclaw.ParseRun(res.Run, runErr)
	if err != nil {
		t.Fatalf("openclaw: %v (after %v; %d audited LLM calls)\nstdout: %s\nstderr: %s", err, time.Since(t0), len(res.Audit), tail(res.Run.Stdout), tail(res.Run.Stderr))
	}
	if got := out.Text(); got != "ANSWER-PRELOADED" {
		t.Errorf("answer %q, want ANSWER-PRELOADED", got)
	}
	if res.Run.Start != port.StartPreloaded || res.Run.PreloadAttestation == nil {
		t.Errorf("the run was not served pre-booted: %q %s", res.Run.Start, res.Run.StartNote)
	}
	if len(res.Audit) == 0 {
		t.Error("no LLM call audited: the turn did not go through the run's proxy")
	}
	t.Logf("pre-booted one-shot: wall %v, sandbox %v, OpenClaw's turn %v, boot overhead %v", wall.Round(time.Millisecond), res.Run.Duration.Round(time.Millisecond), out.Meta.Duration(), (wall - out.Meta.Duration()).Round(time.Millisecond))
}
