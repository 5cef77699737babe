package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/gitcli"
	"github.com/agentsandbox/sandbox/adapters/github"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

// One agent run end to end: a Docker sandbox with no network, an in-process proxy that
// holds the LiteLLM key, and the run's usage reconciled against LiteLLM's spend logs.
func ExampleSandbox_Run() {
	runner, err := docker.NewRunner(docker.WithOwner("my-service"), docker.WithBridge("/opt/agentsandbox/sandbox-bridge"))
	if err != nil {
		panic(err)
	}
	proxies, err := inprocproxy.NewManager(inprocproxy.WithOwner("my-service"), inprocproxy.WithSandboxUID(1001))
	if err != nil {
		panic(err)
	}
	lc, err := litellm.New(litellm.WithBaseURL("http://litellm:4000"), litellm.WithMasterKey("sk-master"))
	if err != nil {
		panic(err)
	}
	rec, err := litellmspend.NewReconciler(lc)
	if err != nil {
		panic(err)
	}
	sb, err := sandbox.New(runner,
		sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: "http://litellm:4000", APIKey: "sk-master"}),
		sandbox.WithReconciler(rec),
	)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ws, err := sandbox.NewWorkspace("/srv/runs", "") // owned by the sandbox user, uid 1001
	if err != nil {
		panic(err)
	}
	defer ws.Remove()
	res, err := sb.Run(ctx, sandbox.Request{
		Grant:        sandbox.Grant{AllowSandbox: true}, // the host's policy decides
		RunID:        "run-42",
		Image:        "my-agent:1.0",
		WorkspaceDir: ws.Dir(),
		Messages:     []sandbox.Message{{Role: "user", Content: "Summarise the repository."}},
		Model:        "gpt-4o-mini",
		Attribution:  port.Attribution{BillingAccountID: "acct-7", UserID: "user-3"},
		Budget:       port.Budget{MaxCalls: 20},
		Reconcile:    true,
	})
	if err != nil {
		fmt.Println("run failed:", err)
		return
	}
	fmt.Println(res.Text)
	fmt.Printf("%d LLM calls, $%.4f\n", res.Usage.Total.Calls, res.Usage.Total.Spend)
}

// An OpenClaw one-shot run in a sandbox: the config's models come from LiteLLM's
// catalog, the prompt travels in a workspace file, the OpenClaw install is mounted
// read-only, and OpenClaw's --json envelope is parsed by the openclaw package: the
// facade hands back the raw output.
func ExampleSandbox_Run_openClaw() {
	ctx := context.Background()
	runner, err := docker.NewRunner(docker.WithOwner("my-service"), docker.WithBridge("/opt/agentsandbox/sandbox-bridge"))
	if err != nil {
		panic(err)
	}
	proxies, err := inprocproxy.NewManager(inprocproxy.WithOwner("my-service"), inprocproxy.WithSandboxUID(1001))
	if err != nil {
		panic(err)
	}
	lc, err := litellm.New(litellm.WithBaseURL("http://litellm:4000"), litellm.WithMasterKey("sk-master"))
	if err != nil {
		panic(err)
	}
	catalog, err := lc.Models(ctx)
	if err != nil {
		panic(err)
	}
	models, err := openclaw.ModelsFromLiteLLM(catalog)
	if err != nil {
		panic(err)
	}
	cfg, err := openclaw.NewConfig(openclaw.WithModels(models...))
	if err != nil {
		panic(err)
	}
	w, err := sandbox.NewWorkspace("/srv/runs", "") // the sandbox user can enter, read and write it
	if err != nil {
		panic(err)
	}
	defer w.Remove()
	ws := w.Dir()
	one := openclaw.OneShot{SessionID: "run-43", Command: []string{"node", "/opt/openclaw/node_modules/openclaw/openclaw.mjs"}}
	if err := one.Prepare(ws, cfg, openclaw.Files{Agents: "You review pull requests."}, "Review the diff in ./pr.diff."); err != nil {
		panic(err)
	}
	spec := port.RunSpec{Limits: port.Limits{Timeout: 15 * time.Minute, MemoryBytes: 1 << 30}}
	if err := one.Apply(&spec); err != nil { // argv, env, and a limit that leaves the agent room
		panic(err)
	}
	sb, err := sandbox.New(runner, sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: "http://litellm:4000", APIKey: "sk-master"}))
	if err != nil {
		panic(err)
	}
	res, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: "run-43",
		Image: "my-node24:1.0", Argv: spec.Argv, Env: spec.Env, Limits: spec.Limits,
		WorkspaceDir: ws,
		Mounts:       []port.Mount{{Source: "/opt/openclaw-2026.9.6", Target: "/opt/openclaw"}},
		Attribution:  port.Attribution{BillingAccountID: "acct-7"},
	})
	var run *port.RunResult
	if res != nil {
		run = res.Run
	}
	out, err := openclaw.ParseRun(run, err)
	if err != nil {
		fmt.Println("openclaw failed:", err) // *openclaw.CLIError, *AgentError, *ExitError or the runner's error
		return
	}
	fmt.Println(out.Text())
}

// A workspace the sandbox user can use, checked the way Run checks it, and removed
// whatever the agent left in it.
func ExampleNewWorkspace() {
	ws, err := sandbox.NewWorkspace("", port.DefaultUser)
	if err != nil {
		panic(err)
	}
	defer ws.Remove()
	fmt.Println("usable:", sandbox.CheckWorkspace(ws.Dir(), port.DefaultUser) == nil)

	// A directory the sandbox user cannot write is refused with its uid and mode.
	err = sandbox.CheckWorkspace("/", port.DefaultUser)
	var we *sandbox.WorkspaceError
	fmt.Println("refused:", errors.As(err, &we), we.UID, fmt.Sprintf("%04o", uint32(we.Mode)))
	// Output:
	// usable: true
	// refused: true 1001 0755
}

// What the result tells besides the output: the calls the proxy refused (a budget
// here, as an error because the request asks for it), live output while the agent
// runs, and the usage reconciled in the background, since LiteLLM writes its spend
// rows in batches every 10 to 60 s.
func ExampleSandbox_Run_policyAndAsyncUsage() {
	var sb *sandbox.Sandbox // as in the Sandbox.Run example, with a reconciler
	ctx := context.Background()
	ws, err := sandbox.NewWorkspace("", "")
	if err != nil {
		panic(err)
	}
	defer ws.Remove()
	res, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: "run-44", Image: "my-agent:1.0",
		WorkspaceDir: ws.Dir(), Model: "gpt-4o-mini",
		Attribution:    port.Attribution{BillingAccountID: "acct-7"},
		Budget:         port.Budget{MaxCalls: 10},
		FailOnBudget:   true,
		Stdout:         os.Stdout, // as it is written, capped at OutputLimit
		Stderr:         os.Stderr,
		Labels:         map[string]string{"team": "reviews"},
		ReconcileAsync: true,
	})
	switch {
	case errors.Is(err, port.ErrBudgetExceeded):
		for _, b := range res.Policy.Blocked {
			fmt.Println("refused:", b.Model, b.Blocked)
		}
	case err != nil:
		fmt.Println("run failed:", err)
		if res == nil {
			return
		}
	}
	usage, err := res.Reconciling.Wait(ctx) // a failed or cancelled run is billed too
	if err != nil {
		fmt.Println("usage incomplete:", err) // port.ErrUnattributed lists the missing calls
	}
	if usage != nil {
		fmt.Printf("%d calls, $%.4f\n", usage.Total.Calls, usage.Total.Spend)
	}
}

// A run on a repository: the host clones it into the workspace, the agent commits,
// the host exports and validates the commits in a sandbox and pushes agent/run-45,
// then opens a pull request because the request asks for one. The token never
// enters the sandbox.
func ExampleSandbox_Run_repository() {
	ctx := context.Background()
	runner, err := docker.NewRunner(docker.WithOwner("my-service"), docker.WithBridge("/opt/agentsandbox/sandbox-bridge"))
	if err != nil {
		panic(err)
	}
	token := func(context.Context, string) (string, error) { return os.Getenv("GITHUB_TOKEN"), nil }
	relay, err := gitcli.NewRelay(runner,
		gitcli.WithExporter("/opt/agentsandbox/sandbox-git-export"),
		gitcli.WithCredentials(func(ctx context.Context, url string) (gitcli.Credential, error) {
			t, err := token(ctx, url)
			return gitcli.Credential{Username: "x-access-token", Password: t}, err
		}))
	if err != nil {
		panic(err)
	}
	prs, err := github.NewPullRequester(github.WithToken(token))
	if err != nil {
		panic(err)
	}
	sb, err := sandbox.New(runner, sandbox.WithRepoRelay(relay), sandbox.WithPullRequester(prs))
	if err != nil {
		panic(err)
	}
	ws, err := sandbox.NewWorkspace("", "") // empty: the clone goes here
	if err != nil {
		panic(err)
	}
	defer ws.Remove()
	res, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: "run-45", Image: "my-agent:1.0",
		WorkspaceDir: ws.Dir(),
		Repo: &sandbox.RepoRequest{
			URL:         "https://github.com/acme/widgets.git",
			Policy:      port.RepoPolicy{DenyPaths: []string{".github/workflows/**"}, NoSubmodules: true},
			PullRequest: &sandbox.PullRequestRequest{Title: "Agent run 45"},
		},
	})
	var pe *port.PushError
	switch {
	case errors.As(err, &pe):
		fmt.Println("push failed; the commits are kept in", pe.Bundle)
	case errors.Is(err, port.ErrRejected):
		fmt.Println("the agent's commits broke the policy:", err)
	case err != nil:
		fmt.Println("run failed:", err)
	}
	if res != nil && res.Repo != nil && res.Repo.Push != nil {
		fmt.Println(res.Repo.Push.Branch, res.Repo.Push.Tip, res.Repo.PullRequest.URL)
	} else if res != nil && res.Repo != nil {
		fmt.Println("not pushed:", res.Repo.NotPushed)
	}
}

// After a host of owner "my-service" died: one call removes what it left (sandboxes,
// sessions, pool slots, run leases, the proxies' directories and sockets, and the
// workspaces with the prompts in them). Run it at start-up, before the new host makes
// anything, or from cron with a grace period. With DryRun it lists the same items.
func ExampleSweep() {
	ctx := context.Background()
	runner, err := docker.NewRunner(docker.WithOwner("my-service"))
	if err != nil {
		panic(err)
	}
	proxies, err := inprocproxy.NewManager(inprocproxy.WithOwner("my-service"))
	if err != nil {
		panic(err)
	}
	reps, err := sandbox.Sweep(ctx, port.SweepOptions{OlderThan: 10 * time.Minute},
		runner, proxies, sandbox.WorkspaceSweeper("", "my-service"))
	for _, rep := range reps {
		for _, item := range rep.Removed {
			fmt.Println("removed", item)
		}
	}
	if err != nil {
		fmt.Println("sweep:", err)
	}
}
