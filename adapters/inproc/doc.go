// Package inproc is the embedded default port.ProxyManager: a Go reverse proxy that runs
// inside the host process, one per run, listening on a unix socket in a per-run
// directory that the runner bind-mounts into the sandbox at port.LLMSocketDir.
//
// Only the proxy holds the LiteLLM key. Every request is rewritten with the shared
// header policy of package proxyconf: client Authorization, other credential headers and
// every x-litellm-* header are removed, and the run's Authorization,
// x-litellm-end-user-id and x-litellm-spend-logs-metadata are set. Because each run has
// its own socket, the socket a request arrives on is the run's identity; nothing an agent
// sends can change who pays. WithSandboxUID adds a kernel check (SO_PEERCRED) of the
// connecting process's uid.
//
// # What is served
//
//   - GET or HEAD /health: {"status":"ok","run_id":"..."}, answered by the proxy itself.
//   - /v1/...: forwarded to the upstream (LiteLLM) unchanged apart from the headers.
//   - A short list of OpenAI paths without the /v1 prefix (/chat/completions,
//     /completions, /embeddings, /models, /moderations, /responses and their
//     sub-paths) is forwarded as /v1/... too, because OpenAI SDKs configured with
//     OPENAI_API_BASE=http://localhost:8080 append the path to the base as is. LiteLLM
//     serves both spellings; allowing only these keeps its admin API (/key/...,
//     /spend/..., /user/...) out of reach even though the injected key may be a master key.
//   - Anything else is a 404 with an OpenAI-style JSON error, and is audited as blocked.
//     Protocol upgrades (WebSocket) are refused: a single upgraded connection could carry
//     any number of model calls past the budget.
//
// Responses are streamed: the proxy never buffers request or response bodies, flushes
// every server-sent-events chunk as it arrives and sets no timeout that could cut a slow
// stream. It asks the upstream for an uncompressed response so the audit can read the
// response id and token usage.
//
// # Audit and budget
//
// Every call (forwarded or refused) gets one port.AuditRecord: time, run, attempt,
// method, path, status, bytes in and out, the request's "model", whether the response
// was streamed, LiteLLM's x-litellm-call-id and x-litellm-response-cost, the response
// body's "id" (from the JSON body or the first SSE chunk), latency, TTFB (the time to
// the first response body byte from the upstream: for a stream, its first chunk), and
// why a call was blocked or failed. The model is read from the request body as it is
// forwarded, so a call that fails before its body was sent has none. Prompts and
// completions are never recorded; an error event inside a stream is recorded by its
// type and code only, since its message may quote the prompt. The records live in the host process, out of the sandbox's reach;
// Proxy.Stop returns them and Proxy.Audit shows them while the proxy runs.
//
// port.Budget.MaxCalls is exact: a call past it gets HTTP 429 with a JSON error of type
// "budget_exceeded" and never reaches the upstream. MaxTokens counts the "usage" the
// upstream reports (a non-streamed body's usage, or a streamed response's usage chunk,
// which OpenAI-style APIs send only when the request asks for it with
// stream_options.include_usage) and refuses calls once the total reaches the cap. It is
// a guard rail, not billing: calls already in flight may overshoot it, and streamed
// calls without a usage chunk do not count. LiteLLM's spend logs stay the billing truth.
//
// # Files and sweeping
//
// Per-run directories live under <base>/<owner>/<runID>-<random> (mode 0711: the
// sandbox user can reach the socket but not list the directory); the socket is mode
// 0666. Next to each directory, not inside the part that is mounted, a marker file
// <runID>-<random>.json records owner, run and creation time, so that Manager.Sweep
// (port.Sweeper) can remove what a dead host process left behind. Stop removes both.
package inproc
