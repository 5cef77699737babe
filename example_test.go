package sandbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inproc"
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
	proxies, err := inproc.NewManager(inproc.WithOwner("my-service"), inproc.WithSandboxUID(1001))
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
	res, err := sb.Run(ctx, sandbox.Request{
		Grant:        sandbox.Grant{AllowSandbox: true}, // the host's policy decides
		RunID:        "run-42",
		Image:        "my-agent:1.0",
		WorkspaceDir: "/srv/runs/run-42",
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
	proxies, err := inproc.NewManager(inproc.WithOwner("my-service"), inproc.WithSandboxUID(1001))
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
	ws := "/srv/runs/run-43" // an existing directory the sandbox user can enter
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
