package gitcli_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/gitcli"
	"github.com/agentsandbox/sandbox/adapters/github"
	"github.com/agentsandbox/sandbox/adapters/github/githubtest"
	"github.com/agentsandbox/sandbox/port"
)

// TestRelayEndToEnd: clone from a token-protected server, an agent commits in a real
// sandbox, the host exports, validates and pushes; the server has exactly the agent's
// commits on agent/<run>, and the token is nowhere but the host's git.
func TestRelayEndToEnd(t *testing.T) {
	for _, rt := range runtimes(t) {
		t.Run(rt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			f := newFixture(t, rt, canaryToken)
			ws := workspace(t)
			runID := "e2e-" + rt.name
			co, err := f.relay.Clone(ctx, port.CloneRequest{RunID: runID, URL: f.url, WorkspaceDir: ws})
			if err != nil {
				t.Fatalf("Clone: %v", err)
			}
			if co.Base != f.seed || co.Branch != "main" || co.DefaultBranch != "main" || co.URL != f.url {
				t.Fatalf("checkout %+v, want base %s on main", co, f.seed)
			}
			cfg, err := os.ReadFile(filepath.Join(ws, ".git", "config"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(cfg), "url = "+f.url+"\n") {
				t.Errorf("workspace remote is not the credential-free URL:\n%s", cfg)
			}
			// --no-local: no object file of the workspace is a hard link (into the mirror).
			filepath.WalkDir(filepath.Join(ws, ".git"), func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if fi, _ := os.Lstat(p); fi != nil && linkCount(fi) > 1 {
						t.Errorf("%s has %d links", p, linkCount(fi))
					}
				}
				return nil
			})
			if _, err := os.Stat(filepath.Join(ws, ".git", "hooks")); err == nil {
				if ents, _ := os.ReadDir(filepath.Join(ws, ".git", "hooks")); len(ents) > 0 {
					t.Errorf("workspace has hooks: %v", ents)
				}
			}

			res, err := rt.runner.RunOnce(ctx, port.RunSpec{RunID: runID, Image: rt.image, Argv: []string{"/agent", "commit", "3"}, WorkspaceDir: ws})
			if err != nil || !res.OK() {
				t.Fatalf("agent: %v %+v\n%s\n%s", err, res, res.Stdout, res.Stderr)
			}
			var agentCommits []string
			for line := range strings.Lines(string(res.Stdout)) {
				if c, ok := strings.CutPrefix(strings.TrimSpace(line), "commit "); ok {
					agentCommits = append([]string{c}, agentCommits...) // newest first
				}
			}
			if len(agentCommits) != 3 {
				t.Fatalf("agent made %d commits:\n%s", len(agentCommits), res.Stdout)
			}

			exp, err := f.relay.Export(ctx, port.ExportRequest{RunID: runID, Checkout: *co, WorkspaceDir: ws, Image: rt.image})
			if err != nil {
				t.Fatalf("Export: %v", err)
			}
			if exp.Tip != agentCommits[0] || strings.Join(exp.Commits, ",") != strings.Join(agentCommits, ",") {
				t.Fatalf("export tip %s commits %v, agent made %v", exp.Tip, exp.Commits, agentCommits)
			}
			pr, err := f.relay.Push(ctx, port.PushRequest{Export: *exp})
			if err != nil {
				t.Fatalf("Push: %v", err)
			}
			if pr.Branch != "agent/"+runID || pr.Tip != agentCommits[0] {
				t.Fatalf("pushed %+v", pr)
			}
			// The server's branch has exactly the agent's commits, byte for byte.
			got, err := f.srv.Git(f.repo, "rev-list", "refs/heads/agent/"+runID, "^main")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(strings.Fields(got), ",") != strings.Join(agentCommits, ",") {
				t.Fatalf("server has %q, want %v", got, agentCommits)
			}
			if main, _ := f.srv.Git(f.repo, "rev-parse", "main"); main != f.seed {
				t.Fatalf("main moved to %s", main)
			}
			if body, _ := f.srv.Git(f.repo, "show", agentCommits[0]+":notes/3.txt"); body != "note 3" {
				t.Fatalf("notes/3.txt on the server: %q", body)
			}
			// A pull request only because this host asks for one.
			gh := githubtest.NewServer(canaryToken, "acme/widgets")
			defer gh.Close()
			prs, err := github.NewPullRequester(github.WithBaseURL(gh.URL), github.WithToken(func(context.Context, string) (string, error) { return canaryToken, nil }))
			if err != nil {
				t.Fatal(err)
			}
			opened, err := prs.OpenPullRequest(ctx, port.PullRequestSpec{URL: co.URL, Head: pr.Branch, Base: co.Branch, Title: "Agent run " + runID})
			if err != nil {
				t.Fatalf("OpenPullRequest: %v", err)
			}
			if got := gh.Pulls(); len(got) != 1 || got[0].Head != "agent/"+runID || got[0].Base != "main" || opened.URL != "https://github.com/acme/widgets/pull/1" {
				t.Fatalf("pull requests %+v, opened %+v", got, opened)
			}
			if f.srv.Denied() == 0 {
				t.Error("the server never asked for the token: the test does not prove the token was needed")
			}

			// Canary: the token is in no workspace file, agent output, log, result or artefact.
			scan := map[string]string{"agent stdout": string(res.Stdout), "agent stderr": string(res.Stderr), "logs": f.logs.String()}
			bundle, _ := os.ReadFile(exp.Bundle)
			scan["artefact"] = string(bundle)
			filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					b, _ := os.ReadFile(p)
					scan[p] = string(b)
				}
				return nil
			})
			filepath.WalkDir(f.cache, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					b, _ := os.ReadFile(p)
					scan[p] = string(b)
				}
				return nil
			})
			for where, s := range scan {
				if strings.Contains(s, canaryToken) {
					t.Errorf("token found in %s", where)
				}
			}
			if len(scan) < 10 {
				t.Fatalf("scanned only %d places", len(scan))
			}
		})
	}
}

// TestPushFailures: a refused token, a non-fast-forward and a server that is down each
// give a typed error naming the artefact, from which the commits are recovered.
func TestPushFailures(t *testing.T) {
	rt := runtimes(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	prepare := func(t *testing.T, f *fixture, runID string, n int) *port.Export {
		t.Helper()
		ws := workspace(t)
		co, err := f.relay.Clone(ctx, port.CloneRequest{RunID: runID, URL: f.url, WorkspaceDir: ws})
		if err != nil {
			t.Fatalf("Clone: %v", err)
		}
		commitFiles(t, ws, map[string]string{"a.txt": runID}, n)
		exp, err := f.relay.Export(ctx, port.ExportRequest{RunID: runID, Checkout: *co, WorkspaceDir: ws, Image: rt.image})
		if err != nil {
			t.Fatalf("Export: %v", err)
		}
		return exp
	}
	recoverable := func(t *testing.T, f *fixture, err error, exp *port.Export) {
		t.Helper()
		var pe *port.PushError
		if !errors.As(err, &pe) || pe.Bundle != exp.Bundle {
			t.Fatalf("error %v is not a PushError naming %s", err, exp.Bundle)
		}
		if strings.Contains(err.Error(), canaryToken) {
			t.Fatal("the error carries the token")
		}
		// The commits come back from the artefact alone (plus the base, which the
		// server's repository on disk has).
		dir := t.TempDir()
		for _, args := range [][]string{
			{"init", "-q", "--bare", dir},
			{"-C", dir, "fetch", "-q", f.srv.RepoDir(f.repo), "main"},
			{"-C", dir, "fetch", "-q", pe.Bundle, "refs/heads/main:refs/heads/recovered"},
		} {
			if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v: %s", args, err, out)
			}
		}
		if out, _ := exec.Command("git", "-C", dir, "rev-parse", "recovered").Output(); strings.TrimSpace(string(out)) != exp.Tip {
			t.Fatalf("recovered %q, want %s", out, exp.Tip)
		}
	}

	t.Run("auth refused", func(t *testing.T) {
		f := newFixture(t, rt, canaryToken)
		exp := prepare(t, f, "auth", 1)
		bad := newFixtureSameServer(t, f, "wrong-"+canaryToken)
		_, err := bad.relay.Push(ctx, port.PushRequest{Export: *exp})
		if !errors.Is(err, port.ErrPermissionDenied) {
			t.Fatalf("Push with a wrong token: %v, want ErrPermissionDenied", err)
		}
		recoverable(t, f, err, exp)
	})
	t.Run("non-fast-forward", func(t *testing.T) {
		f := newFixture(t, rt, canaryToken)
		first := prepare(t, f, "nff-a", 2)
		second := prepare(t, f, "nff-b", 1)
		if _, err := f.relay.Push(ctx, port.PushRequest{Export: *first, Branch: "agent/shared"}); err != nil {
			t.Fatal(err)
		}
		_, err := f.relay.Push(ctx, port.PushRequest{Export: *second, Branch: "agent/shared"})
		if !errors.Is(err, port.ErrConflict) {
			t.Fatalf("non-fast-forward push: %v, want ErrConflict", err)
		}
		recoverable(t, f, err, second)
		// Forcing needs the policy's leave.
		_, err = f.relay.Push(ctx, port.PushRequest{Export: *second, Branch: "agent/shared", Force: true})
		var re *port.RejectError
		if !errors.As(err, &re) || re.Rule != port.RulePushBranch {
			t.Fatalf("forced push without leave: %v", err)
		}
		if _, err := f.relay.Push(ctx, port.PushRequest{Export: *second, Branch: "agent/shared", Force: true, Policy: port.RepoPolicy{AllowForce: true}}); err != nil {
			t.Fatalf("forced push with leave: %v", err)
		}
		if tip, _ := f.srv.Git(f.repo, "rev-parse", "agent/shared"); tip != second.Tip {
			t.Fatalf("agent/shared is %s, want %s", tip, second.Tip)
		}
	})
	t.Run("server down", func(t *testing.T) {
		f := newFixture(t, rt, canaryToken)
		exp := prepare(t, f, "down", 1)
		f.srv.Close()
		_, err := f.relay.Push(ctx, port.PushRequest{Export: *exp})
		if !errors.Is(err, port.ErrUnavailable) {
			t.Fatalf("push to a stopped server: %v, want ErrUnavailable", err)
		}
		recoverable(t, f, err, exp)
	})
}

// TestNoCommits: an agent that commits nothing gives an empty export, and Push refuses
// it without touching the remote.
func TestNoCommits(t *testing.T) {
	rt := runtimes(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, rt, canaryToken)
	ws := workspace(t)
	co, err := f.relay.Clone(ctx, port.CloneRequest{RunID: "idle", URL: f.url, WorkspaceDir: ws})
	if err != nil {
		t.Fatal(err)
	}
	// Uncommitted edits are not the agent's work product: only commits are exported.
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("edited, not committed\n"), 0o644)
	exp, err := f.relay.Export(ctx, port.ExportRequest{RunID: "idle", Checkout: *co, WorkspaceDir: ws, Image: rt.image})
	if err != nil {
		t.Fatal(err)
	}
	if !exp.Empty() || exp.Bundle != "" || exp.Tip != co.Base {
		t.Fatalf("export %+v, want empty at the base", exp)
	}
	before := len(f.srv.Requests())
	if _, err := f.relay.Push(ctx, port.PushRequest{Export: *exp}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Fatalf("Push of an empty export: %v", err)
	}
	if after := len(f.srv.Requests()); after != before {
		t.Fatalf("an empty push reached the server (%d requests)", after-before)
	}
}

// TestConcurrentClones: clones of one remote share its mirror under a lock; each gets
// the same base and a complete workspace.
func TestConcurrentClones(t *testing.T) {
	rt := runtimes(t)[0]
	f := newFixture(t, rt, canaryToken)
	ctx := context.Background()
	errs := make(chan error, 4)
	bases := make(chan string, 4)
	for i := range 4 {
		ws := workspace(t)
		go func() {
			co, err := f.relay.Clone(ctx, port.CloneRequest{RunID: "c" + string(rune('0'+i)), URL: f.url, WorkspaceDir: ws})
			if err == nil {
				if _, serr := os.Stat(filepath.Join(ws, "src", "main.go")); serr != nil {
					err = serr
				}
				bases <- co.Base
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		if b := <-bases; b != f.seed {
			t.Fatalf("base %s, want %s", b, f.seed)
		}
	}
}

// TestExportSandboxLimits: an exporter that cannot finish inside its sandbox's limits
// is the run's typed failure, not a refusal and not a hang.
func TestExportSandboxLimits(t *testing.T) {
	rt := runtimes(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, rt, canaryToken, gitcli.WithExportLimits(port.Limits{Timeout: time.Millisecond}))
	ws := workspace(t)
	co, err := f.relay.Clone(ctx, port.CloneRequest{RunID: "slow", URL: f.url, WorkspaceDir: ws})
	if err != nil {
		t.Fatal(err)
	}
	commitFiles(t, ws, map[string]string{"a.txt": "a"}, 1)
	_, err = f.relay.Export(ctx, port.ExportRequest{RunID: "slow", Checkout: *co, WorkspaceDir: ws, Image: rt.image})
	if !errors.Is(err, port.ErrTimeout) || errors.Is(err, port.ErrRejected) {
		t.Fatalf("Export with a 1 ms limit: %v, want ErrTimeout", err)
	}
}

// TestCloneFailures: a refused token and a stopped server are typed, and the error
// never carries the token.
func TestCloneFailures(t *testing.T) {
	rt := runtimes(t)[0]
	ctx := context.Background()
	f := newFixture(t, rt, canaryToken)
	bad := newFixtureSameServer(t, f, "wrong-"+canaryToken)
	_, err := bad.relay.Clone(ctx, port.CloneRequest{RunID: "c1", URL: f.url, WorkspaceDir: workspace(t)})
	if !errors.Is(err, port.ErrPermissionDenied) || strings.Contains(err.Error(), canaryToken) {
		t.Fatalf("clone with a wrong token: %v", err)
	}
	if _, err := f.relay.Clone(ctx, port.CloneRequest{RunID: "c2", URL: f.url, Branch: "nope", WorkspaceDir: workspace(t)}); !errors.Is(err, port.ErrNotFound) {
		t.Fatalf("clone of a missing branch: %v", err)
	}
	f.srv.Close()
	_, err = f.relay.Clone(ctx, port.CloneRequest{RunID: "c3", URL: f.url, WorkspaceDir: workspace(t)})
	if !errors.Is(err, port.ErrUnavailable) {
		t.Fatalf("clone from a stopped server: %v", err)
	}
}

// TestCredentialNeverOnArgv: every git the relay runs is logged through a wrapper; the
// token is on no command line, while the server did require it for clone and push.
func TestCredentialNeverOnArgv(t *testing.T) {
	rt := runtimes(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	realGit, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	argvLog := filepath.Join(dir, "argv.log")
	wrapper := filepath.Join(dir, "git")
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> " + argvLog + "\nexec " + realGit + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, rt, canaryToken, gitcli.WithGit(wrapper))
	ws := workspace(t)
	co, err := f.relay.Clone(ctx, port.CloneRequest{RunID: "argv", URL: f.url, WorkspaceDir: ws})
	if err != nil {
		t.Fatal(err)
	}
	commitFiles(t, ws, map[string]string{"a.txt": "a"}, 1)
	exp, err := f.relay.Export(ctx, port.ExportRequest{RunID: "argv", Checkout: *co, WorkspaceDir: ws, Image: rt.image})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.relay.Push(ctx, port.PushRequest{Export: *exp}); err != nil {
		t.Fatal(err)
	}
	logged, err := os.ReadFile(argvLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" fetch --prune", " clone --no-local", " index-pack --strict", " push --no-verify"} {
		if !strings.Contains(string(logged), want) {
			t.Errorf("no %q among the relay's git commands:\n%s", want, logged)
		}
	}
	if strings.Contains(string(logged), canaryToken) {
		t.Fatalf("the token is on a git command line:\n%s", logged)
	}
	if f.srv.Denied() == 0 {
		t.Fatal("the server never challenged: the token was not shown to be needed")
	}
}
