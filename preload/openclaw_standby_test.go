package preload

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
)

// workerLog is a --require hook that appends "UNIX_MS SCRIPT" to LOG for every worker
// thread the process starts fresh: the script's URL, "standby" for the preloader's
// standbys (an eval worker with their workerData) or "eval" for another eval worker. A
// standby handed to OpenClaw at the claim starts no thread and logs nothing.
const workerLog = `const fs = require('node:fs'), wt = require('node:worker_threads'), mod = require('node:module');
const log = process.env.LOG; // the preloader replaces the environment
if (wt.isMainThread) {
  const W = wt.Worker;
  wt.Worker = class extends W {
    constructor(file, opts) {
      super(file, opts);
      const standby = opts && opts.eval && Array.isArray(opts.workerData && opts.workerData.pins);
      fs.appendFileSync(log, Date.now() + ' ' + (standby ? 'standby' : opts && opts.eval ? 'eval' : String(file)) + '\n');
    }
  };
  mod.syncBuiltinESMExports();
}
`

// archiveWorker is the script of the session archive's maintenance workers, which the
// preloader starts ahead only with --standby-archive-workers.
const archiveWorker = "config/sessions/session-accessor.sqlite-archive.worker.js"

// openClawWorkerIdle is how long OpenClaw's worker task pools keep an idle worker
// (WorkerTaskPool's default idleTimeoutMs) before retiring it.
const openClawWorkerIdle = 60 * time.Second

// TestOpenClawStandbyWorkersServeTheRun claims a warmed preloader on the host with a
// real one-shot (its own config, state, workspace and session; the fake LiteLLM as
// its endpoint) and checks that the run answers and that every worker thread OpenClaw
// started after the claim was one of the session archive's two (which the preloader
// leaves to the run: it does not wait for them): every other worker it asked for was a
// standby started before it. It fails if a standby is refused (another script or
// options in an upgrade), used up, or never handed over. The claim comes after
// OpenClaw's worker idle timeout, as a pool's claims usually do (and as any claim did
// on a loaded machine, where the standbys' start alone took longer): a worker the
// warm-up left in a pool of OpenClaw's is gone by then and would be started again
// after the claim. With --standby-archive-workers the archive's workers are standbys
// too, and the run starts no worker at all.
func TestOpenClawStandbyWorkersServeTheRun(t *testing.T) {
	for _, c := range []struct {
		name     string
		idle     time.Duration
		args     []string
		standbys int
		archive  int // fresh archive workers allowed after the claim
	}{
		{"default", openClawWorkerIdle + 5*time.Second, []string{"--warm-up"}, 5, 2},
		// Without the idle wait: the flag's point is the archive's standbys, and the
		// default case proves the rest after OpenClaw's idle timeout.
		{"archive standbys", 0, []string{"--warm-up", "--standby-archive-workers"}, 7, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines, claimed, turn := claimLogging(t, workerLog, c.idle, c.args...)
			standbys, archive := 0, 0
			var others []string
			for _, l := range lines {
				ms, script, _ := strings.Cut(l, " ")
				at, _ := strconv.ParseInt(ms, 10, 64)
				switch {
				case at < claimed:
					if script == "standby" {
						standbys++
					}
				case strings.HasSuffix(script, "/"+archiveWorker):
					archive++
				default:
					others = append(others, script)
				}
			}
			if len(others) > 0 {
				t.Errorf("OpenClaw started %d worker threads after the claim that a standby should have served: %v", len(others), others)
			}
			if archive > c.archive {
				t.Errorf("OpenClaw started %d archive workers after the claim, want at most %d", archive, c.archive)
			}
			if standbys != c.standbys {
				t.Errorf("%d standbys started before the claim, want %d", standbys, c.standbys)
			}
			t.Logf("%d standbys before the claim; after it %d fresh archive workers; reported turn %v", standbys, archive, turn)
		})
	}
}

// TestOpenClawNoStandbyWorkers: with --no-standby-workers the warm-up starts no
// standbys (the idle slot's memory is the price they cost), so the run starts its
// worker threads after the claim, fresh, and answers as with them.
func TestOpenClawNoStandbyWorkers(t *testing.T) {
	before, after, turn := claimCountingWorkers(t, 0, "--warm-up-follow-up", "--no-standby-workers")
	if after < 6 {
		t.Errorf("OpenClaw started %d worker threads after the claim: without standbys it starts its own (six or more)", after)
	}
	t.Logf("%d worker threads before the claim (the warm-up's own), %d after; reported turn %v", before, after, turn)
}

// claimCountingWorkers starts a host preloader with args, waits until it is ready and
// then idle more, claims it with a real one-shot (its own config, state, workspace and
// session; the fake LiteLLM as its endpoint), checks that the run answers, and returns
// how many worker threads the process started before and after the claim, and
// OpenClaw's reported turn.
func claimCountingWorkers(t *testing.T, idle time.Duration, args ...string) (before, after int, turn time.Duration) {
	t.Helper()
	lines, claimed, turn := claimLogging(t, workerLog, idle, args...)
	for _, l := range lines {
		ms, _ := strconv.ParseInt(strings.Fields(l)[0], 10, 64)
		if ms >= claimed {
			after++
		} else {
			before++
		}
	}
	return before, after, turn
}

// claimLogging starts a host preloader with args and the --require hook, which appends
// lines "UNIX_MS ..." to the file named by LOG; waits until it is ready and then idle
// more; claims it with a real one-shot (its own config, state, workspace and session;
// the fake LiteLLM as its endpoint); checks that the run answers; and returns the
// hook's lines, the claim's time (Unix ms) and OpenClaw's reported turn.
func claimLogging(t *testing.T, hook string, idle time.Duration, args ...string) (lines []string, claimed int64, turn time.Duration) {
	t.Helper()
	return claimLoggingWith(t, hook, idle, nil, args...)
}

// claimLoggingWith is claimLogging with before, when not nil, called with the run's
// environment after its workspace is prepared and before the claim.
func claimLoggingWith(t *testing.T, hook string, idle time.Duration, before func(env map[string]string), args ...string) (lines []string, claimed int64, turn time.Duration) {
	t.Helper()
	dir := os.Getenv("OPENCLAW_DIR")
	testenv.Need(t, "openclaw", dir != "", "OPENCLAW_DIR is not set (scripts/install-openclaw.sh)")
	pkg := filepath.Join(dir, "node_modules", "openclaw")
	fake := litellmtest.NewServer(litellmtest.WithReply(func(litellmtest.ChatRequest) litellmtest.Reply {
		return litellmtest.Reply{Content: "ANSWER-STANDBY", PromptTokens: 3, CompletionTokens: 1}
	}), litellmtest.WithMasterKey(openclaw.PlaceholderAPIKey))
	defer fake.Close()

	log := filepath.Join(t.TempDir(), "hook.log")
	h := startHostPreload(t, pkg, hook, []string{"LOG=" + log}, args...)
	h.waitReady()
	time.Sleep(idle)

	ws := t.TempDir()
	cfg, err := openclaw.NewConfig(openclaw.WithModels(openclaw.Model{ID: "gpt-4o-mini", ContextWindow: 128000, MaxTokens: 16384}),
		openclaw.WithBaseURL(fake.URL+"/v1"), openclaw.WithWorkspace(ws), openclaw.WithAgentTimeout(120*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	one := openclaw.OneShot{SessionID: "standby-run", Timeout: 120 * time.Second, Command: []string{"openclaw"}, Workspace: ws}
	if err := one.Prepare(ws, cfg, openclaw.Files{}, "Reply with the code word."); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(one.Env())
	}
	argv, err := one.Argv()
	if err != nil {
		t.Fatal(err)
	}
	claim := bridgeapi.PreloadClaim{Argv: argv, Dir: ws, Env: []string{"PATH=/usr/bin:/bin", "LOG=" + log}}
	for k, v := range one.Env() {
		claim.Env = append(claim.Env, k+"="+v)
	}
	b, _ := json.Marshal(claim)
	claimed = time.Now().UnixMilli()
	if _, err := h.ctl.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	if l := h.line(time.Minute); !strings.Contains(l, `"started":true`) {
		t.Fatalf("the claim was not started: %q\n%s", l, h.stderr.String())
	}
	code := 0
	if err := h.cmd.Wait(); err != nil {
		code = h.cmd.ProcessState.ExitCode()
	}
	res, err := openclaw.ParseResult(code, []byte(h.stdout.String()), []byte(h.stderr.String()))
	if err != nil || res.Text() != "ANSWER-STANDBY" {
		t.Fatalf("the run did not answer: %v %v\n%s", err, res, h.stderr.String())
	}
	logged, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if l := strings.TrimSpace(string(logged)); l != "" {
		lines = strings.Split(l, "\n")
	}
	return lines, claimed, res.Meta.Duration()
}

// childLog is a --require hook that appends "UNIX_MS ARGS_JSON" to LOG for every child
// process the preloader's process starts (the arguments after the program).
const childLog = `const fs = require('node:fs'), cp = require('node:child_process');
const log = process.env.LOG; // the preloader replaces the environment
const spawn = cp.ChildProcess.prototype.spawn;
cp.ChildProcess.prototype.spawn = function (o) {
  fs.appendFileSync(log, Date.now() + ' ' + JSON.stringify((o.args || []).slice(1)) + '\n');
  return spawn.call(this, o);
};
`

// sqliteChildArg marks OpenClaw's SQLite read-only snapshot child in its arguments.
const sqliteChildArg = "--openclaw-sqlite-readonly-child"

// TestOpenClawSpareSqliteChildServesTheRun claims a warmed preloader on the host with a
// real one-shot and checks the child processes it started: the warm-up started one spare
// SQLite child (one `node -e` with the child's entry), and after the claim OpenClaw's
// SQLite snapshot child, which every fresh one-shot asks for, was never started fresh:
// the spare served it. With --no-spare-sqlite-child no spare is started and the same run
// starts the child fresh after the claim, which shows the run does ask for it and that
// the hook sees it. A run whose state directory is not empty at the claim gets no spare.
func TestOpenClawSpareSqliteChildServesTheRun(t *testing.T) {
	count := func(before func(map[string]string), args ...string) (spares, freshAfter int) {
		lines, claimed, _ := claimLoggingWith(t, childLog, 0, before, args...)
		for _, l := range lines {
			ms, _ := strconv.ParseInt(strings.Fields(l)[0], 10, 64)
			switch {
			case strings.Contains(l, sqliteChildArg):
				if ms >= claimed {
					freshAfter++
				}
			case strings.Contains(l, `"-e"`) && strings.Contains(l, "sqlite-readonly-location.worker.js"):
				spares++
			}
		}
		return spares, freshAfter
	}
	if spares, fresh := count(nil, "--warm-up"); spares != 1 || fresh != 0 {
		t.Errorf("%d spare SQLite children started, %d fresh ones after the claim; want the one spare serving the run, no fresh one", spares, fresh)
	}
	if spares, fresh := count(nil, "--warm-up", "--no-spare-sqlite-child"); spares != 0 || fresh < 1 {
		t.Errorf("with --no-spare-sqlite-child: %d spares, %d fresh SQLite children after the claim; want none and at least one", spares, fresh)
	}
	// A run whose state directory is not empty at the claim is not a fresh one: the spare
	// is killed and the run starts its children itself.
	existing := func(env map[string]string) {
		dir := env["OPENCLAW_STATE_DIR"]
		if dir == "" {
			t.Fatal("the one-shot's environment names no OPENCLAW_STATE_DIR")
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "agentsandbox-test-marker"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if spares, fresh := count(existing, "--warm-up"); spares != 1 || fresh < 1 {
		t.Errorf("a run on a non-empty state directory: %d spares started, %d fresh SQLite children after the claim; want the spare left unused and at least one fresh", spares, fresh)
	}
}
