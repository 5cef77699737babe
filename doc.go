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
// LLM at http://127.0.0.1:8080 through the sandbox's bridge, and the answer on stdout.
// The result carries the raw output; an agent with structured output has its own
// parser (openclaw.ParseRun for OpenClaw).
//
// The facade imports only port/ (and the module's log attribute keys); adapters live
// in adapters/, litellm/ and openclaw/.
package sandbox
