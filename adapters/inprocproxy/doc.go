// Package inprocproxy is the embedded default port.ProxyManager: a Go reverse proxy that runs
// inside the host process, one per run, listening on a unix socket in a per-run
// directory that the runner bind-mounts into the sandbox at port.LLMSocketDir.
//
// Only the proxy holds the LiteLLM key. Because each run has its own socket, the socket
// a request arrives on is the run's identity; nothing an agent sends can change who
// pays. WithSandboxUID adds a kernel check (SO_PEERCRED) of the connecting process's
// uid. Everything else — routes, header and body policy, budget, audit — is the shared
// proxy engine's (internal/llmproxy), the same for every front; this package only maps
// a socket to its run.
//
// # What is served
//
//   - GET or HEAD /health: {"status":"ok","run_id":"..."}, answered by the proxy itself.
//   - The inference routes of proxypolicy.Routes, and nothing else: POST
//     /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses,
//     /v1/moderations, /v1/messages, and GET /v1/models[/{model}]; each also without
//     the /v1 prefix, because OpenAI SDKs configured with
//     OPENAI_API_BASE=http://localhost:8080 append the path to the base as is. LiteLLM
//     serves admin and cross-tenant APIs under /v1 too (/v1/mcp/server, /v1/files,
//     /v1/batches, ...): they get a 404 naming the rule ("route_allowlist"). The key
//     should still be a LiteLLM virtual key limited to LLM routes, never the master key.
//   - A path in a form routers may read differently (percent escapes, dot segments,
//     doubled or trailing slashes) gets a 400 ("canonical_path"). A route under another
//     method gets a 405; protocol upgrades a 501 (one upgraded connection could carry
//     any number of calls past the budget). Query strings are dropped (LiteLLM reads
//     some, such as team_id on /v1/models).
//   - Only allowlisted client headers (proxypolicy.AllowedRequestHeaders) reach the
//     upstream, plus the injected Authorization, x-litellm-end-user-id and
//     x-litellm-spend-logs-metadata.
//   - Request bodies of inference routes are read (bounded by WithMaxRequestBytes),
//     parsed, and forwarded with only the route's allowlisted keys (metadata,
//     litellm_metadata, api_base, ... are dropped) and "user" set to the billing
//     account; a body that is not one JSON object gets a 400 ("body_policy"). A run
//     holds at most four bodies in memory at once; further calls wait their turn.
//
// Responses are streamed: the proxy flushes every server-sent-events chunk as it
// arrives and sets no timeout that could cut a slow stream. It asks the upstream for an
// uncompressed response so the audit can read the response id and token usage.
//
// One run holds at most 64 connections at once and the manager 1024 (WithConnLimits);
// more wait in the kernel's listen queue. Headers must arrive within 5 s. The pool is
// shared fairly: each run is guaranteed its share (llmproxy.GuaranteedConns, 8) that
// other runs cannot take, and borrowing beyond it leaves a quarter of the pool free for
// runs that start later, so runs within their caps cannot delay another run's first
// connection.
//
// # Audit and budget
//
// Every call (forwarded or refused) gets one port.AuditRecord: time, run, attempt,
// method, path, status, bytes in and out, the request's "model", whether the response
// was streamed, LiteLLM's x-litellm-call-id and x-litellm-response-cost, the response
// body's "id" (from the JSON body or the first SSE chunk), latency, TTFB (the time to
// the first response body byte from the upstream: for a stream, its first chunk), and
// why a call was blocked or failed (Blocked names the rule). Prompts and completions
// are never recorded; an error event inside a stream is recorded by its type and code
// only, since its message may quote the prompt. The records live in the host process,
// out of the sandbox's reach; Proxy.Stop returns them and Proxy.Audit shows them while
// the proxy runs. Billable calls are always recorded; refused calls and forwarded calls
// that cannot cost anything (GET /v1/models) are recorded up to 1000 each and counted
// past that (Proxy.AuditStats).
//
// port.Budget.MaxCalls is exact: a call past it gets HTTP 429 with a JSON error of type
// "budget_exceeded" and never reaches the upstream. MaxTokens counts the "usage" the
// upstream reports (streamed completions are always asked for it). Each call reserves
// its worst case before it is forwarded (see port.Budget.MaxTokens: its body bytes
// and its tools' documented overhead, plus its choices times its output cap, which the
// proxy writes into the body, lowered to what is left) and settles on its reported
// usage, so whatever the concurrency the budget is overshot by at most one call's
// excess; a successful call that reports no usage is charged its reservation. Tools the
// provider runs itself (web search, web fetch, ...) are refused under a token budget. It is a guard rail, not billing: LiteLLM's spend
// logs stay the billing truth.
//
// # Files and sweeping
//
// Per-run directories live under <base>/<owner>/<runID>-<random> (mode 0711: the
// sandbox user can reach the socket but not list the directory); the socket is mode
// 0666. Next to each directory, not inside the part that is mounted, a marker file
// <runID>-<random>.json records owner, run and creation time, so that Manager.Sweep
// (port.Sweeper) can remove what a dead host process left behind. Stop removes both.
package inprocproxy
