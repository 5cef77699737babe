// Package sandbox runs untrusted AI agents in locked-down containers and gives them LLM
// access without ever giving them a secret.
//
// A host application composes a Sandbox from ports: a port.SandboxRunner (Docker or
// containerd), optionally a port.ProxyManager (an in-process Go proxy or an nginx
// container per run) with the upstream LiteLLM address and key, and optionally a
// port.SpendReconciler. Sandbox.Run then executes one agent run end to end: the
// messages are written into the workspace, a per-run proxy is started on a unix socket
// that only this run's sandbox can reach, the agent runs with no network, and the result
// comes back with the proxy's audit of every LLM call and, if asked, the run's usage
// reconciled against LiteLLM's spend logs.
//
// The agent contract is small: the messages as JSON in a workspace file
// (DefaultMessagesFile), the model in an environment variable (DefaultModelEnv), the
// LLM at http://127.0.0.1:8080 through the sandbox's bridge (and the variables the
// OpenAI and Anthropic SDKs read, port.LLMEnv, so an unmodified SDK works), and the
// answer on stdout. The result carries the raw output; an agent with structured output
// has its own parser (openclaw.ParseRun for OpenClaw).
//
// The result tells the whole truth: Result.Policy lists the calls the proxy refused
// (Request.FailOnBudget makes a budget refusal an error wrapping
// port.ErrBudgetExceeded); usage is reconciled on every path, also for failed and
// cancelled runs, and in the background with Request.ReconcileAsync; Request.Stdout and
// Stderr receive output while the agent runs. NewWorkspace makes a workspace the
// sandbox user can use, and Run refuses one it cannot (*WorkspaceError). With
// WithRepoRelay, Request.Repo clones a repository into the workspace and pushes the
// agent's commits to a branch afterwards, and Result.Repo says what was pushed.
//
// Environment precedence is one rule on every runtime: the library's own variables
// (the model variable, HOSTNAME, port.LLMEnv) win over Request.Env. Every constructor
// takes its own WithLogger option and logs nothing by default.
//
// The facade imports only port/ (and the module's log attribute keys); adapters live
// in adapters/, litellm/ and openclaw/.
package sandbox
