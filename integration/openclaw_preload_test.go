package integration

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
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
	testOpenClawOneShotPreloaded(t, dockerRunnerFor, "")
}

// TestOpenClawOneShotPreloadedContainerd is TestOpenClawOneShotPreloadedDocker on
// containerd's warm pool. About 20-40 s.
func TestOpenClawOneShotPreloadedContainerd(t *testing.T) {
	testOpenClawOneShotPreloaded(t, containerdRunnerFor, "")
}

// TestOpenClawOneShotPreloadedWarmUpDocker is TestOpenClawOneShotPreloadedDocker with
// the preloader's warm-up turn (--warm-up): before the claim the slot ran a whole
// throwaway turn against the preloader's loopback stub, with its own config, model,
// endpoint, session and prompt. The run must use its own config, model and endpoint
// (its answer is the fake LiteLLM's, through its proxy; OpenClaw reports the run's
// provider and model), and nothing of the warm-up may be in its state directory
// (session store, transcripts) or in the LLM traffic it sent. About 40-90 s.
func TestOpenClawOneShotPreloadedWarmUpDocker(t *testing.T) {
	testOpenClawOneShotPreloaded(t, dockerRunnerFor, "--warm-up")
}

// TestOpenClawOneShotPreloadedWarmUpContainerd is
// TestOpenClawOneShotPreloadedWarmUpDocker on containerd's warm pool (loopback is up in
// its slots before the claim too). About 40-90 s.
func TestOpenClawOneShotPreloadedWarmUpContainerd(t *testing.T) {
	testOpenClawOneShotPreloaded(t, containerdRunnerFor, "--warm-up")
}

// openClawWarmUpMarkers are strings only the OpenClaw preloader's warm-up turn uses
// (its session id, model, prompt and stub's answer): none may reach a run.
var openClawWarmUpMarkers = []string{"openclaw-preload-warm-up", "OPENCLAW-PRELOAD-WARM-UP-REPLY", "warm-up turn"}

// openClawPreload is the preload of a pre-booted OpenClaw slot: the preloader (with
// its warm-up turn when warmUp) over the OpenClaw package mounted at AppDir.
func openClawPreload(t testing.TB, appDir string, warmUp bool, mounts ...port.Mount) *port.Preload {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, preload.OpenClawName), preload.OpenClaw, 0o644); err != nil {
		t.Fatal(err)
	}
	argv := []string{testimages.NodeBinary, "/opt/preload/" + preload.OpenClawName}
	p := &port.Preload{Mounts: append([]port.Mount{{Source: dir, Target: "/opt/preload"}, {Source: appDir, Target: testimages.AppDir}}, mounts...)}
	if warmUp {
		// A whole turn before ready: give a loaded machine time.
		argv, p.Timeout = append(argv, "--warm-up"), 6*time.Minute
	}
	p.Argv = append(argv, testimages.AppDir+"/node_modules/openclaw")
	return p
}

// assertNoWarmUpState fails when anything under the run's workspace directory dir
// (OpenClaw's state: session store, transcripts) holds a warm-up marker or one of
// others (another run's canaries); it also requires the run's own session id there, so
// the scan itself can fail.
func assertNoWarmUpState(t testing.TB, ws, sessionID string, others ...string) {
	t.Helper()
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	sawRun, files := false, 0
	err = fs.WalkDir(root.FS(), openclaw.OneShotDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := root.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		sawRun = sawRun || bytes.Contains(b, []byte(sessionID))
		for _, m := range openClawWarmUpMarkers {
			if bytes.Contains(b, []byte(m)) {
				t.Errorf("the run's %s holds the warm-up's %q", p, m)
			}
		}
		for _, m := range others {
			if bytes.Contains(b, []byte(m)) {
				t.Errorf("the run %s's %s holds another run's %q", sessionID, p, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sawRun {
		t.Errorf("none of the %d files of the run's OpenClaw state holds its session id %q: the scan reads nothing", files, sessionID)
	}
}

// testOpenClawOneShotPreloaded runs a real one-shot on a pre-booted slot of a warm pool
// whose OpenClaw preloader runs with flag ("", "--warm-up" or "--warm-up-follow-up"),
// with its own canary.
func testOpenClawOneShotPreloaded(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string), flag string) {
	appDir, nodeBin := openClawInstall(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	fake := litellmtest.NewServer(litellmtest.WithReply(markerReply))
	defer fake.Close()
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin, func(ctx context.Context) (string, []byte, error) {
		return testimages.NodeArchive(ctx, nodeBin)
	})
	warmUp := flag != ""
	pre := openClawPreload(t, appDir, warmUp)
	if warmUp {
		pre.Argv[slices.Index(pre.Argv, "--warm-up")] = flag
	}
	runs := 1
	// The limit leaves room for a heavily loaded machine (a cold one-shot took 3 min at
	// load 40 on 2 vCPUs).
	limits := port.Limits{Timeout: 8 * time.Minute, MemoryBytes: 1 << 30}
	if warmUp {
		limits.MemoryBytes = openClawWarmUpMemory
	}
	tmpl := port.TemplateOf(port.RunSpec{Image: image, WorkspaceDir: "/", LLM: &port.LLMSocket{HostDir: "/"}, Limits: limits, Preload: pre})
	pool, err := runner.(port.Pooler).WarmPool(ctx, tmpl, port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(context.Background())
	sb, lc := newStack(t, runner, fake, sandbox.WithPool(pool))
	cfg := openClawConfig(ctx, t, lc)

	slot := preloadedSlotRun{sb: sb, cfg: cfg, image: image, pre: pre, limits: limits, flag: flag}
	var all []preloadedSlotRun
	for i := range runs {
		// markerReply's markers are capital letters only.
		// One slot at a time (the pool refills after each claim): a slot's warm-up is
		// CPU-bound, and two at once on 2 loaded vCPUs take twice as long each.
		for deadline := time.Now().Add(max(pre.Timeout, 6*time.Minute) + time.Minute); pool.Stats().Ready < 1; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) || pool.Stats().PreloadFailed > 0 {
				t.Fatalf("the pre-booted slot never became ready: %+v", pool.Stats())
			}
		}
		r := slot
		r.canary = "PRELOADED" + strings.Map(func(r rune) rune { return 'A' + r%26 }, fmt.Sprint(i)+sandboxtest.RunID("c")[2:])
		r.run(ctx, t)
		all = append(all, r)
	}
	chats := 0
	for _, r := range fake.Requests() {
		if strings.HasSuffix(r.Path, "/chat/completions") {
			chats++
			if !bytes.Contains(r.Body, []byte("MARKER=PRELOADED")) || !bytes.Contains(r.Body, []byte(`"gpt-4o-mini"`)) {
				t.Errorf("an LLM call of the run lacks its prompt or model: %.300s", r.Body)
			}
			for _, m := range openClawWarmUpMarkers {
				if bytes.Contains(r.Body, []byte(m)) {
					t.Errorf("the run's LLM call carries the warm-up's %q", m)
				}
			}
		}
	}
	if chats < runs {
		t.Errorf("the fake LiteLLM saw %d chat completions for %d runs: a run used another endpoint", chats, runs)
	}
	for i, d := range all {
		var others []string
		for j, e := range all {
			if j != i {
				others = append(others, e.canary, e.runID)
			}
		}
		assertNoWarmUpState(t, d.ws, d.runID, others...)
	}
}

// preloadedSlotRun is one one-shot of testOpenClawOneShotPreloaded on a pre-booted slot:
// its inputs, then (after run) its run id and workspace.
type preloadedSlotRun struct {
	sb                  *sandbox.Sandbox
	cfg                 *openclaw.Config
	image, flag, canary string
	pre                 *port.Preload
	limits              port.Limits
	runID, ws           string
}

// run runs the one-shot with its canary as the prompt's marker and checks what it
// answered, which endpoint, model and session it used, and that it was served
// pre-booted.
func (r *preloadedSlotRun) run(ctx context.Context, t *testing.T) {
	t.Helper()
	r.runID = sandboxtest.RunID("openclaw-pre")
	one := openclaw.OneShot{SessionID: r.runID, Timeout: 150 * time.Second, Command: []string{testimages.NodeBinary, testimages.AppDir + "/node_modules/openclaw/openclaw.mjs"}}
	r.ws = newWorkspace(t)
	if err := one.Prepare(r.ws, r.cfg, openclaw.Files{Agents: "You are a test agent."}, "Reply with the code word. MARKER="+r.canary); err != nil {
		t.Fatal(err)
	}
	spec := port.RunSpec{Limits: r.limits}
	if err := one.Apply(&spec); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	res, runErr := r.sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: r.runID, Image: r.image,
		Argv: spec.Argv, Env: spec.Env, WorkspaceDir: r.ws, Limits: spec.Limits, Preload: r.pre,
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
	if got := out.Text(); got != "ANSWER-"+r.canary {
		t.Errorf("answer %q, want ANSWER-%s", got, r.canary)
	}
	if res.Run.Start != port.StartPreloaded || res.Run.PreloadAttestation == nil {
		t.Errorf("the run was not served pre-booted: %q %s", res.Run.Start, res.Run.StartNote)
	}
	if len(res.Audit) == 0 {
		t.Error("no LLM call audited: the turn did not go through the run's proxy")
	}
	if am := out.Meta.AgentMeta; am.Provider != openclaw.DefaultProvider || am.Model != "gpt-4o-mini" || am.SessionID != r.runID {
		t.Errorf("the run reports provider %q, model %q, session %q: want the run's config's %q, gpt-4o-mini, %q", am.Provider, am.Model, am.SessionID, openclaw.DefaultProvider, r.runID)
	}
	for _, m := range openClawWarmUpMarkers {
		if bytes.Contains(res.Run.Stdout, []byte(m)) || bytes.Contains(res.Run.Stderr, []byte(m)) {
			t.Errorf("the run's output mentions the warm-up's %q:\n%s", m, tail(res.Run.Stderr))
		}
	}
	var claimMiB, peakMiB uint64
	if m := res.Run.Memory; m != nil {
		claimMiB, peakMiB = m.ClaimBytes>>20, m.PeakBytes>>20
	}
	t.Logf("pre-booted one-shot (%q): wall %v, sandbox %v, OpenClaw's turn %v, boot overhead %v; idle slot %d MiB, run's peak %d MiB of %d MiB", r.flag, wall.Round(time.Millisecond), res.Run.Duration.Round(time.Millisecond), out.Meta.Duration(), (wall - out.Meta.Duration()).Round(time.Millisecond), claimMiB, peakMiB, r.limits.MemoryBytes>>20)
}

// openClawWarmUpMemory is the memory limit of a slot whose OpenClaw preloader ran the
// warm-up turn: the sandbox's default. The warmed process holds what the turn loaded
// and its standby workers (840-850 MiB idle here, without a compile cache) and a run's
// peak stayed at 868-873 MiB (docs/warm-pools-and-runtimes.md has the figures).
const openClawWarmUpMemory = 1 << 30
