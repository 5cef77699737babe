package integration

import (
	"context"
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
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// conversationWord is what the first turn of the hibernated conversation tells
// OpenClaw, and only the first.
const conversationWord = "PINEAPPLE-7"

// conversationReply answers the follow-up ("What was the code word?") from the
// conversation the model is given: with the word when an earlier turn of the
// request's messages holds it, NO-MEMORY when none does. A prompt with a MARKER gets
// markerReply's answer; other prompts get NOTED.
func conversationReply(req litellmtest.ChatRequest) litellmtest.Reply {
	var all strings.Builder
	for _, m := range req.Messages {
		all.WriteString(m.Content)
		all.WriteByte('\n')
	}
	switch {
	case strings.Contains(all.String(), "MARKER="):
		return markerReply(req) // a compile cache's build run
	case !strings.Contains(all.String(), "What was the code word"):
		return litellmtest.Reply{Content: "NOTED", PromptTokens: 30, CompletionTokens: 2}
	case strings.Contains(all.String(), conversationWord):
		return litellmtest.Reply{Content: "ANSWER-" + conversationWord, PromptTokens: 60, CompletionTokens: 4}
	default:
		return litellmtest.Reply{Content: "NO-MEMORY"}
	}
}

// openClawConversation is an OpenClaw conversation kept across sandboxes: a facade
// with a pool of pre-booted OpenClaw slots, a hibernation store, and the one-shot
// layout every turn uses (one OpenClaw session id for the whole conversation).
type openClawConversation struct {
	runner port.SandboxRunner
	sb     *sandbox.Sandbox
	pool   port.Pool
	image  string
	appDir string
	cfg    *openclaw.Config
	pre    *port.Preload
	limits port.Limits
	store  *sandbox.HibernationStore
	one    openclaw.OneShot
	spec   port.RunSpec // the one-shot's argv and environment
	mounts []port.Mount // added to sessions too (a compile cache)
}

// openClawRunner is a runner of newRunner's kind with the Node image, and the
// OpenClaw install.
func openClawRunner(t testing.TB, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) (runner port.SandboxRunner, image, appDir string) {
	t.Helper()
	appDir, nodeBin := openClawInstall(t)
	runner, image = newRunner(t, testenv.Bridge(t), func(ctx context.Context) (string, []byte, error) {
		return testimages.NodeArchive(ctx, nodeBin)
	})
	return runner, image, appDir
}

// newOpenClawConversation sets a conversation up on runner: a pool of one slot
// pre-booted by the OpenClaw preloader (with its warm-up turn when warmUp, and mounts
// added to its preload: a compile cache), the facade over it, the config and a store.
func newOpenClawConversation(t testing.TB, runner port.SandboxRunner, image, appDir string, fake *litellmtest.Server, warmUp bool, mounts ...port.Mount) *openClawConversation {
	t.Helper()
	flag := ""
	if warmUp {
		flag = "--warm-up"
	}
	return newOpenClawConversationWith(t, runner, image, appDir, fake, flag, mounts...)
}

// newOpenClawConversationWith is newOpenClawConversation with the preloader's warm-up
// flag: "" (imports only), "--warm-up" or "--warm-up-follow-up", and after it the
// preloader's other flags, if any (space-separated).
func newOpenClawConversationWith(t testing.TB, runner port.SandboxRunner, image, appDir string, fake *litellmtest.Server, flag string, mounts ...port.Mount) *openClawConversation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	warmUp := flag != ""
	pre := openClawPreload(t, appDir, warmUp, mounts...)
	if i := slices.Index(pre.Argv, "--warm-up"); i >= 0 {
		pre.Argv = slices.Concat(pre.Argv[:i], strings.Fields(flag), pre.Argv[i+1:])
	}
	if strings.HasPrefix(flag, "--warm-up-follow-up") {
		// Two warm-up turns, then the state database: about twice --warm-up's boot.
		pre.Timeout *= 2
	}
	c := &openClawConversation{runner: runner, image: image, appDir: appDir, pre: pre, mounts: mounts}
	c.limits = port.Limits{Timeout: 8 * time.Minute, MemoryBytes: 1 << 30}
	if warmUp {
		// A warmed slot holds 670-900 MiB idle, and a turn on existing state (the
		// doctor's preflight, the transcript) needs more than a fresh one: 1 GiB was
		// seen OOM-killed under load.
		c.limits.MemoryBytes = 3 << 29
	}
	tmpl := port.TemplateOf(port.RunSpec{Image: image, WorkspaceDir: "/", LLM: &port.LLMSocket{HostDir: "/"}, Limits: c.limits, Preload: c.pre})
	pool, err := runner.(port.Pooler).WarmPool(ctx, tmpl, port.PoolOptions{Size: 1, RefillBetweenRuns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close(context.Background()) })
	c.pool = pool
	sb, client := newStack(t, runner, fake, sandbox.WithPool(pool))
	c.sb = sb
	c.cfg = openClawConfig(ctx, t, client)
	if c.store, err = sandbox.NewHibernationStore(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	c.one = openclaw.OneShot{SessionID: sandboxtest.RunID("conv"), Timeout: 150 * time.Second,
		Command: []string{testimages.NodeBinary, testimages.AppDir + "/node_modules/openclaw/openclaw.mjs"}}
	c.spec = port.RunSpec{Limits: c.limits}
	if err := c.one.Apply(&c.spec); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitReady waits for the pool's slot to have booted.
func (c *openClawConversation) waitReady(t testing.TB) {
	t.Helper()
	for deadline := time.Now().Add(max(c.pre.Timeout, 6*time.Minute) + time.Minute); c.pool.Stats().Ready < 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) || c.pool.Stats().PreloadFailed > 0 {
			t.Fatalf("the pre-booted slot never became ready: %+v", c.pool.Stats())
		}
	}
}

// startSession starts the conversation's first segment: an idle sandbox with the
// one-shot layout in its workspace, OpenClaw mounted, and its first turn's inputs.
func (c *openClawConversation) startSession(ctx context.Context, t testing.TB, prompt string) (*sandbox.Session, string) {
	t.Helper()
	ws := newWorkspace(t)
	if err := c.one.Prepare(ws, c.cfg, openclaw.Files{Agents: "You are a test agent."}, prompt); err != nil {
		t.Fatal(err)
	}
	sess, err := c.sb.Start(ctx, sandbox.SessionRequest{Request: sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("oc-seg"), Image: c.image,
		Argv: []string{testimages.NodeBinary, "-e", "setInterval(() => {}, 1 << 30)"}, Env: c.spec.Env,
		WorkspaceDir: ws, Mounts: append([]port.Mount{{Source: c.appDir, Target: testimages.AppDir}}, c.mounts...),
		Attribution: port.Attribution{BillingAccountID: "acct-conv"},
		Limits:      port.Limits{Timeout: 15 * time.Minute, MemoryBytes: 3 << 29},
		Reconcile:   true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	// A test that fails before it hibernates or stops the session leaves nothing.
	t.Cleanup(func() { sess.Stop(context.Background(), 0) })
	return sess, ws
}

// turn runs one turn of the conversation in the session (an exec of the one-shot).
func (c *openClawConversation) turn(ctx context.Context, t testing.TB, sess *sandbox.Session) *openclaw.Result {
	t.Helper()
	t0 := time.Now()
	// A cold OpenClaw in a session: about 10 s on a quiet machine, over 4 minutes once
	// in CI under the whole suite's load.
	r, err := sess.Exec(ctx, port.ExecSpec{Argv: c.spec.Argv, Timeout: 8 * time.Minute})
	if err != nil {
		if r != nil {
			t.Fatalf("turn: %v after %v\nstdout: %s\nstderr: %s", err, time.Since(t0), tail(r.Stdout), tail(r.Stderr))
		}
		t.Fatalf("turn: %v after %v", err, time.Since(t0))
	}
	t.Logf("turn in %v", time.Since(t0))
	out, err := openclaw.ParseResult(r.ExitCode, r.Stdout, r.Stderr)
	if err != nil {
		t.Fatalf("turn: %v\nstdout: %s\nstderr: %s", err, tail(r.Stdout), tail(r.Stderr))
	}
	return out
}

// resumeTurn runs the next turn from hibernation h in a pre-booted slot: the state
// restored into a fresh workspace, the turn's inputs written over it, the one-shot
// run through the pool.
func (c *openClawConversation) resumeTurn(ctx context.Context, t testing.TB, h *sandbox.Hibernation, runID, prompt string) (*sandbox.Result, *openclaw.Result, error) {
	t.Helper()
	res, runErr := c.sb.RunFrom(ctx, h, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: c.image,
		Argv: c.spec.Argv, Env: c.spec.Env, WorkspaceDir: newWorkspace(t), Limits: c.limits, Preload: c.pre,
		Attribution: port.Attribution{BillingAccountID: "acct-conv"}, Reconcile: true,
	}, sandbox.WithPrepare(func(ws string) error {
		return c.one.PrepareNext(ws, c.cfg, openclaw.Files{Agents: "You are a test agent."}, prompt)
	}))
	if res == nil || res.Run == nil {
		return res, nil, runErr
	}
	out, err := openclaw.ParseRun(res.Run, runErr)
	return res, out, err
}

// TestOpenClawHibernateResumeDocker: a real OpenClaw 2026.9.6 conversation outlives
// its sandbox on Docker. Its first turn runs in a session; the session is hibernated
// (its OpenClaw state saved, the sandbox removed); the follow-up, which only the
// first turn's content answers, runs in a pre-booted slot of a warm pool from the
// saved state, and is answered from it. Both segments' calls are audited and
// reconciled, each under its own run; the LiteLLM key and the excluded paths are
// nowhere in the store. About 1-3 min.
func TestOpenClawHibernateResumeDocker(t *testing.T) {
	testOpenClawHibernateResume(t, dockerRunnerFor)
}

// TestOpenClawHibernateResumeContainerd is TestOpenClawHibernateResumeDocker on
// containerd.
func TestOpenClawHibernateResumeContainerd(t *testing.T) {
	testOpenClawHibernateResume(t, containerdRunnerFor)
}

func testOpenClawHibernateResume(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	fake := litellmtest.NewServer(litellmtest.WithReply(conversationReply), litellmtest.WithBatchWriteDelay(200*time.Millisecond))
	defer fake.Close()
	runner, image, appDir := openClawRunner(t, newRunner)
	c := newOpenClawConversation(t, runner, image, appDir, fake, false)

	sess, _ := c.startSession(ctx, t, "Remember: the code word is "+conversationWord+". Reply NOTED.")
	if got := c.turn(ctx, t, sess).Text(); got != "NOTED" {
		t.Fatalf("first turn answered %q", got)
	}
	t0 := time.Now()
	h, res1, err := sess.Hibernate(ctx, sandbox.HibernateOptions{Store: c.store, Exclude: openclaw.HibernateExclude, Grace: 5 * time.Second})
	if err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	t.Logf("hibernated in %v: %d files, %d bytes, skipped %v", time.Since(t0), h.Saved.Files, h.Saved.Bytes, h.Saved.Skipped)
	if h.Saved.Files == 0 || len(res1.Audit) == 0 {
		t.Fatalf("saved %+v, audit %d", h.Saved, len(res1.Audit))
	}
	assertNotInStore(t, c.store.Dir(), fake.MasterKey())
	if rep, err := c.runner.(port.Sweeper).Sweep(ctx, port.SweepOptions{RunID: sess.RunID(), DryRun: true}); err != nil || len(rep.Removed) > 0 {
		t.Errorf("the hibernated session's sandbox is left: %v %v", rep.Removed, err)
	}

	c.waitReady(t)
	h2, err := c.store.Open(h.ID)
	if err != nil {
		t.Fatal(err)
	}
	runID := sandboxtest.RunID("oc-resumed")
	t1 := time.Now()
	res, out, err := c.resumeTurn(ctx, t, h2, runID, "What was the code word? Answer with it.")
	if err != nil {
		t.Fatalf("resumed turn: %v (%v)", err, res)
	}
	t.Logf("resume -> answer in %v (OpenClaw's turn %v)", time.Since(t1), time.Duration(out.Meta.DurationMs)*time.Millisecond)
	if got := out.Text(); got != "ANSWER-"+conversationWord {
		t.Errorf("the follow-up answered %q: the conversation did not carry over", got)
	}
	if res.Run.Start != port.StartPreloaded {
		t.Errorf("the resumed turn was not served pre-booted: %q %s", res.Run.Start, res.Run.StartNote)
	}
	if am := out.Meta.AgentMeta; am.SessionID != c.one.SessionID {
		t.Errorf("OpenClaw ran session %q, want the conversation's %q", am.SessionID, c.one.SessionID)
	}
	// The follow-up's model call carried the first turn, and went through the
	// resumed run's own proxy, attributed to it.
	carried := false
	for _, r := range fake.Requests() {
		if !strings.HasSuffix(r.Path, "/chat/completions") || !strings.Contains(string(r.Body), "What was the code word") {
			continue
		}
		carried = carried || strings.Contains(string(r.Body), conversationWord)
		if md := r.Header.Get("X-Litellm-Spend-Logs-Metadata"); !strings.Contains(md, runID) {
			t.Errorf("the follow-up's call was attributed %s", md)
		}
	}
	if !carried {
		t.Error("no model call of the follow-up carried the first turn's content")
	}
	segs := res.Segments
	if len(segs) != 2 || segs[0].RunID != sess.RunID() || segs[1].RunID != runID {
		t.Fatalf("segments %+v", segs)
	}
	for i, s := range segs {
		if len(s.Audit) == 0 || s.Usage == nil || s.Usage.Total.Calls != len(s.Audit) || len(s.Usage.Missing) != 0 {
			t.Errorf("segment %d (%s): %d audited, usage %+v", i, s.RunID, len(s.Audit), s.Usage)
		}
	}
}
