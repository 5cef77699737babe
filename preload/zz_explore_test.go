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
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
)

func TestZZExploreExistingState(t *testing.T) {
	dir := os.Getenv("OPENCLAW_DIR")
	pkg := filepath.Join(dir, "node_modules", "openclaw")
	fake := litellmtest.NewServer(litellmtest.WithReply(func(litellmtest.ChatRequest) litellmtest.Reply {
		return litellmtest.Reply{Content: "ANSWER", PromptTokens: 3, CompletionTokens: 1}
	}), litellmtest.WithMasterKey(openclaw.PlaceholderAPIKey))
	defer fake.Close()
	claimRun := func(name, flag string, ws string, one openclaw.OneShot, prep func() error) {
		log := filepath.Join(t.TempDir(), "workers.log")
		loads := filepath.Join(t.TempDir(), "loads.log")
		t0 := time.Now()
		h := startHostPreload(t, pkg, "{"+workerLog+"}\n{"+loadLog+"}", []string{"WORKER_LOG=" + log, "LOAD_LOG=" + loads}, flag)
		h.waitReady()
		boot := time.Since(t0)
		if err := prep(); err != nil {
			t.Fatal(err)
		}
		argv, _ := one.Argv()
		claim := bridgeapi.PreloadClaim{Argv: argv, Dir: ws, Env: []string{"PATH=/usr/bin:/bin", "WORKER_LOG=" + log}}
		for k, v := range one.Env() {
			claim.Env = append(claim.Env, k+"="+v)
		}
		b, _ := json.Marshal(claim)
		claimed := time.Now()
		rss := ""
		if st, err := os.ReadFile("/proc/" + strconv.Itoa(h.cmd.Process.Pid) + "/status"); err == nil {
			for _, l := range strings.Split(string(st), "\n") {
				if strings.HasPrefix(l, "VmRSS") || strings.HasPrefix(l, "RssAnon") {
					rss += strings.Join(strings.Fields(l), " ") + " "
				}
			}
		}
		before, _ := os.ReadFile(loads)
		h.ctl.Write(append(b, '\n'))
		h.line(time.Minute)
		code := 0
		if err := h.cmd.Wait(); err != nil {
			code = h.cmd.ProcessState.ExitCode()
		}
		wall := time.Since(claimed)
		res, err := openclaw.ParseResult(code, []byte(h.stdout.String()), []byte(h.stderr.String()))
		if err != nil {
			t.Fatalf("%v %s", err, h.stderr.String())
		}
		logged, _ := os.ReadFile(log)
		after := 0
		for _, l := range strings.Split(strings.TrimSpace(string(logged)), "\n") {
			ms, _ := strconv.ParseInt(strings.Fields(l)[0], 10, 64)
			if ms >= claimed.UnixMilli() {
				after++
			}
		}
		all, _ := os.ReadFile(loads)
		newMods := strings.Count(string(all[len(before):]), "\n")
		t.Logf("%-28s modules-after-claim %d (before %d)", name, newMods, strings.Count(string(before), "\n"))
		t.Logf("%-28s boot %5.1fs wall %v turn %v workers-after %d idle %s", name, boot.Seconds(), wall.Round(time.Millisecond), res.Meta.Duration(), after, rss)
	}
	mk := func(sid string) (string, openclaw.OneShot, *openclaw.Config) {
		ws := t.TempDir()
		cfg, _ := openclaw.NewConfig(openclaw.WithModels(openclaw.Model{ID: "gpt-4o-mini", ContextWindow: 128000, MaxTokens: 16384}),
			openclaw.WithBaseURL(fake.URL+"/v1"), openclaw.WithWorkspace(ws), openclaw.WithAgentTimeout(120*time.Second))
		return ws, openclaw.OneShot{SessionID: sid, Timeout: 120 * time.Second, Command: []string{"openclaw"}, Workspace: ws}, cfg
	}
	ws, one, cfg := mk("conv")
	claimRun("first turn (warm-up)", "--warm-up", ws, one, func() error { return one.Prepare(ws, cfg, openclaw.Files{}, "first") })
	for i, flag := range []string{"--warm-up", "--warm-up-follow-up"} {
		claimRun("existing "+flag, flag, ws, one, func() error { return one.PrepareNext(ws, cfg, openclaw.Files{}, "turn "+strconv.Itoa(i)) })
	}
}
