package integration

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/preload"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// buildConversationCompileCache builds OpenClaw's compile cache with a conversation's
// two turns: a fresh one-shot, then its follow-up on the state the first left. A turn
// on existing state loads what a fresh one never does (the doctor's state-migration
// preflight) and starts a dozen short-lived Node child processes of OpenClaw's
// (read-only SQLite snapshots, the agent schema inspection, the integrity check), each
// compiling from source whatever a read-only cache lacks: a cache built by a fresh
// one-shot alone lacks their modules. Returns the cache and its file count.
func buildConversationCompileCache(ctx context.Context, tb testing.TB, stack *openClawStack) (*openclaw.CompileCache, int) {
	tb.Helper()
	cache, err := openclaw.NewCompileCache(filepath.Join(tb.TempDir(), "compile-cache-conversation"), preload.OpenClawVersion)
	if err != nil {
		tb.Fatal(err)
	}
	err = cache.Build(ctx, func(ctx context.Context, m port.Mount) error {
		stack.mounts = []port.Mount{m}
		defer func() { stack.mounts = nil }()
		runID := sandboxtest.RunID("cc-conv")
		ws, res, runErr := stack.run(ctx, tb, runID, port.Attribution{BillingAccountID: "acct-cc"}, openclaw.Files{}, "Reply with the code word. MARKER=BUILD", false)
		if out, err := openclaw.ParseRun(res.Run, runErr); err != nil || out.Text() != "ANSWER-BUILD" {
			return fmt.Errorf("first turn: %v %v\n%s", err, out, tail(res.Run.Stderr))
		}
		res, runErr = stack.runNext(ctx, tb, ws, runID, sandboxtest.RunID("cc-conv-next"), "Reply with the code word. MARKER=NEXT")
		if out, err := openclaw.ParseRun(res.Run, runErr); err != nil || out.Text() != "ANSWER-NEXT" {
			return fmt.Errorf("follow-up turn: %v %v\n%s", err, out, tail(res.Run.Stderr))
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return cache, countFiles(tb, cache.Dir())
}

// runNext runs the next turn of session sessionID in ws, where an earlier turn of
// stack.run left OpenClaw's state (OneShot.PrepareNext), as stack.run runs a first one.
func (s *openClawStack) runNext(ctx context.Context, t testing.TB, ws, sessionID, runID, prompt string) (*sandbox.Result, error) {
	t.Helper()
	one := openclaw.OneShot{SessionID: sessionID, Timeout: 150 * time.Second,
		Command: []string{testimages.NodeBinary, testimages.AppDir + "/node_modules/openclaw/openclaw.mjs"}}
	if err := one.PrepareNext(ws, s.cfg, openclaw.Files{}, prompt); err != nil {
		t.Fatal(err)
	}
	spec := port.RunSpec{Limits: port.Limits{Timeout: 4 * time.Minute, MemoryBytes: 1 << 30}}
	if err := one.Apply(&spec); err != nil {
		t.Fatal(err)
	}
	maps.Copy(spec.Env, s.env)
	res, runErr := s.sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: s.image,
		Argv: spec.Argv, Env: spec.Env, WorkspaceDir: ws,
		Mounts:      append([]port.Mount{{Source: s.appDir, Target: testimages.AppDir}}, s.mounts...),
		Attribution: port.Attribution{BillingAccountID: "acct-cc"}, Limits: spec.Limits,
	})
	if res == nil || res.Run == nil {
		t.Fatalf("Run: %v", runErr)
	}
	return res, runErr
}
