package integration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/gitcli"
	"github.com/agentsandbox/sandbox/adapters/github"
	"github.com/agentsandbox/sandbox/adapters/github/githubtest"
	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/internal/testsupport/gittest"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

const repoToken = "ghp_facadeCanary0123456789abcdef"

func gitAgentImage(ctx context.Context) (string, []byte, error) {
	bin, err := agentimage.BuildGo(ctx, "github.com/agentsandbox/sandbox/internal/testsupport/gittest/agent")
	if err != nil {
		return "", nil, err
	}
	img := agentimage.Static("agentsandbox/gitagent", bin)
	img.Labels = map[string]string{agentimage.TestImageLabel: "integration"}
	return img.Archive()
}

func TestRepoRunDocker(t *testing.T)     { testRepoRun(t, dockerRunnerFor) }
func TestRepoRunContainerd(t *testing.T) { testRepoRun(t, containerdRunnerFor) }

// testRepoRun: the facade clones a token-protected repository into the workspace, a
// go-git agent commits in a real sandbox, the facade exports and pushes a branch and,
// asked, opens a pull request; the server's branch has exactly the agent's commits,
// and the token is in no workspace file and no agent output. A failed run is exported
// but not pushed; a refused push keeps the commits in the artefact.
func testRepoRun(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	testenv.NeedCommand(t, "git", "git")
	// Builds (the exporter, the agent's image) and the runs, each under its own
	// Request.Timeout: on a new, loaded machine the builds alone took most of the
	// 4-minute limit this had.
	ctx, cancel := testenv.UntimedContext(t)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin, gitAgentImage)
	exporter, err := gitcli.BuildExporter(ctx, filepath.Join(os.TempDir(), "agentsandbox-git-export-test"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gittest.NewServer(t.TempDir(), repoToken)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	seed, err := srv.CreateRepo("acme/widgets", map[string]string{"README.md": "# widgets\n"})
	if err != nil {
		t.Fatal(err)
	}
	var token atomic.Value
	token.Store(repoToken)
	relay, err := gitcli.NewRelay(runner, gitcli.WithExporter(exporter), gitcli.WithCacheDir(t.TempDir()),
		gitcli.WithCredentials(func(context.Context, string) (gitcli.Credential, error) {
			return gitcli.Credential{Username: "x-access-token", Password: token.Load().(string)}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	gh := githubtest.NewServer(repoToken, "acme/widgets")
	defer gh.Close()
	prs, err := github.NewPullRequester(github.WithBaseURL(gh.URL), github.WithToken(func(context.Context, string) (string, error) { return repoToken, nil }))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(runner, sandbox.WithRepoRelay(relay), sandbox.WithPullRequester(prs))
	if err != nil {
		t.Fatal(err)
	}
	req := func(name string, commits string) sandbox.Request {
		return sandbox.Request{
			Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID(name), Image: image,
			Argv: []string{"/agent", "commit", commits}, WorkspaceDir: newWorkspace(t),
			Messages: []sandbox.Message{{Role: "user", Content: "add notes"}},
			Limits:   port.Limits{Timeout: time.Minute},
			Repo:     &sandbox.RepoRequest{URL: srv.RepoURL("acme/widgets"), Policy: port.RepoPolicy{NoSubmodules: true}},
		}
	}

	t.Run("PushedWithPullRequest", func(t *testing.T) {
		r := req("frepo", "3")
		r.Repo.PullRequest = &sandbox.PullRequestRequest{Title: "Agent notes"}
		res, err := sb.Run(ctx, r)
		if err != nil {
			t.Fatalf("Run: %v (%s)", err, stderr(res))
		}
		rr := res.Repo
		if rr == nil || rr.Push == nil || rr.Checkout.Base != seed || rr.Push.Branch != "agent/"+r.RunID || len(rr.Push.Commits) != 3 {
			t.Fatalf("repo result %+v", rr)
		}
		got, err := srv.Git("acme/widgets", "rev-list", "refs/heads/agent/"+r.RunID, "^main")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(strings.Fields(got), ",") != strings.Join(rr.Push.Commits, ",") {
			t.Errorf("server has %q, the result says %v", got, rr.Push.Commits)
		}
		// The prompt was not committed.
		if files, _ := srv.Git("acme/widgets", "ls-tree", "-r", "--name-only", rr.Push.Tip); strings.Contains(files, ".cogni") {
			t.Errorf("the messages file was committed: %s", files)
		}
		if rr.PullRequest == nil || rr.PullRequest.URL != "https://github.com/acme/widgets/pull/1" {
			t.Errorf("pull request %+v", rr.PullRequest)
		}
		if p := gh.Pulls(); len(p) != 1 || p[0].Head != rr.Push.Branch || p[0].Base != "main" {
			t.Errorf("pulls %+v", p)
		}
		// The token is nowhere the agent could see it.
		if strings.Contains(string(res.Run.Stdout)+string(res.Run.Stderr), repoToken) {
			t.Error("the token reached the agent's environment or output")
		}
		_ = filepath.WalkDir(r.WorkspaceDir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), repoToken) {
					t.Errorf("the token is in the workspace file %s", p)
				}
			}
			return nil
		})
	})

	t.Run("FailedRunExportedNotPushed", func(t *testing.T) {
		r := req("frepofail", "2")
		r.Argv = []string{"/agent", "commit", "2", "fail"}
		res, err := sb.Run(ctx, r)
		if err != nil || res.Run.ExitCode != 3 {
			t.Fatalf("a failed agent is no error of the run: %v %+v", err, res)
		}
		rr := res.Repo
		if rr.Export == nil || len(rr.Export.Commits) != 2 || rr.Push != nil || !strings.Contains(rr.NotPushed, rr.Export.Bundle) {
			t.Fatalf("repo %+v", rr)
		}
		if fi, serr := os.Stat(rr.Export.Bundle); serr != nil || fi.Size() == 0 {
			t.Errorf("artefact %s: %v", rr.Export.Bundle, serr)
		}
		if _, err := srv.Git("acme/widgets", "rev-parse", "--verify", "refs/heads/agent/"+r.RunID); err == nil {
			t.Error("a failed run's branch was pushed")
		}
	})

	t.Run("RefusedPushKeepsCommits", func(t *testing.T) {
		r := req("freporefused", "1")
		// The clone fetches with the right token; once the agent runs (its live
		// output says so), the host's credential is wrong for the push.
		r.Stdout = &watch{want: "env ", seen: func() { token.Store("wrong-token") }}
		defer token.Store(repoToken)
		res, err := sb.Run(ctx, r)
		var pe *port.PushError
		if !errors.As(err, &pe) || !errors.Is(err, port.ErrPermissionDenied) || res == nil || res.Repo.Export == nil || pe.Bundle != res.Repo.Export.Bundle {
			t.Fatalf("err = %v, res = %+v", err, res)
		}
		if fi, serr := os.Stat(pe.Bundle); serr != nil || fi.Size() == 0 {
			t.Errorf("artefact %s: %v", pe.Bundle, serr)
		}
		if strings.Contains(err.Error(), "wrong-token") || strings.Contains(err.Error(), repoToken) {
			t.Errorf("a token in the error: %v", err)
		}
	})

	t.Run("ForgedIdentity", func(t *testing.T) {
		// By default a forged author, committer and signature reach the remote byte for
		// byte (the README says so); RewriteIdentity makes them the run's, unsigned.
		for _, rewrite := range []bool{false, true} {
			r := req(fmt.Sprintf("frepoforge%v", rewrite), "1")
			r.Argv = []string{"/agent", "commit", "1", "forge"}
			r.Repo.RewriteIdentity = rewrite
			res, err := sb.Run(ctx, r)
			if err != nil || res.Repo.Push == nil {
				t.Fatalf("Run: %v (%s)", err, stderr(res))
			}
			raw, err := srv.Git("acme/widgets", "cat-file", "commit", res.Repo.Push.Tip)
			if err != nil {
				t.Fatal(err)
			}
			id := port.RunIdentity(r.RunID)
			if rewrite {
				if strings.Contains(raw, "gpgsig") || strings.Contains(raw, "torvalds") || !strings.Contains(raw, "author "+id.Name+" <"+id.Email+">") {
					t.Fatalf("rewritten commit:\n%s", raw)
				}
			} else if !strings.Contains(raw, "gpgsig -----BEGIN PGP SIGNATURE-----") || !strings.Contains(raw, "author Linus Torvalds <torvalds@linux-foundation.org>") {
				t.Fatalf("default policy commit:\n%s", raw)
			}
		}
	})

	t.Run("FIFORefusedAtOnce", func(t *testing.T) {
		// A FIFO at packed-refs: refused by the relay with its rule and path, at once,
		// not after the export sandbox's timeout.
		r := req("frepofifo", "1")
		r.Argv = []string{"/agent", "commit", "1", "fifo"}
		start := time.Now()
		res, err := sb.Run(ctx, r)
		took := time.Since(start)
		var re *port.RejectError
		if !errors.As(err, &re) || re.Rule != port.RuleLayout || re.Path != ".git/packed-refs" {
			t.Fatalf("err = %v (%+v), res = %+v", err, re, res)
		}
		if took > 30*time.Second {
			t.Fatalf("Run took %v", took)
		}
		t.Logf("Run with a FIFO at packed-refs refused in %v", took)
	})

	t.Run("PushTargetRefused", func(t *testing.T) {
		r := req("frepomain", "1")
		r.Repo.PushBranch = "main"
		res, err := sb.Run(ctx, r)
		if !errors.Is(err, port.ErrRejected) || res == nil || res.Repo.Export == nil || !strings.Contains(err.Error(), res.Repo.Export.Bundle) {
			t.Fatalf("err = %v, res = %+v", err, res)
		}
		if main, _ := srv.Git("acme/widgets", "rev-parse", "main"); main != seed {
			t.Errorf("main moved to %s", main)
		}
	})
}
