// Package billing attributes every LLM call of a shared OpenClaw gateway to the run
// (and billing account) it belongs to, and fails closed on calls it cannot
// attribute.
//
// In gateway mode one long-running OpenClaw gateway serves many runs at once, and
// upstream OpenClaw (2026.9.x) sends nothing per session to an OpenAI-compatible
// provider: no user, metadata or session field in the body and no session header
// (unless opted in per model, see the design document), and its provider headers
// are static. What it does honour per session is the model, and so the provider
// and that provider's baseUrl. The package builds on that:
//
//   - A Router is one shared proxy (an http.Handler on a loopback port or unix
//     socket) in front of LiteLLM. Router.Register gives a run a 256-bit random
//     token; calls to /r/<token>/v1/... are the run's. Everything after that is
//     the shared proxy engine's (internal/llmproxy), as for the per-run socket
//     proxy: only the inference routes of proxypolicy.Routes, only allowlisted
//     client headers and body keys, the key, x-litellm-end-user-id and
//     x-litellm-spend-logs-metadata injected, the run's budget, and a
//     port.AuditRecord per call.
//     Registration.Stop revokes the token and returns the audit.
//   - A Preparer makes the gateway use that path for one session: it adds a
//     per-run provider whose baseUrl is the run's path (config.patch, hot-reloaded
//     by the gateway) and sets the session's model to it (sessions.patch). Release
//     undoes both.
//   - A call without a live token (the gateway's default provider should point at
//     the router's plain /v1, a stray subagent session, a revoked run, a guess) is
//     refused with HTTP 403 and counted as unattributed; WithFallback bills such
//     calls to an explicit, flagged fallback account instead.
//
// Gateways that accept per-session outboundHeaders (the original system's fork)
// can carry the token in TokenHeader instead: see ProbeOutboundHeaders and
// Preparer.PrepareHeaders.
//
// What this guarantees, and what it cannot: every call is billed to a run that was
// live when the call was made, or refused; the LiteLLM key never enters the
// gateway. A malicious tool running inside the shared gateway can read the
// gateway's config and so the tokens of runs live at the same time, and bill its
// calls to one of them; it cannot bill an account with no live run, reach LiteLLM
// with its own attribution, or exceed a run's budget. Runs that must not share
// that exposure need their own gateway (attribution per gateway) or the one-shot
// sandbox mode, where a per-run socket makes the identity kernel-guaranteed. The
// repository's docs/openclaw-gateway-billing.md has the evidence and the table.
package billing
