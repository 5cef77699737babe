// Package litellm is a client for the management API of a LiteLLM proxy.
//
// Client reads spend logs (GET /spend/logs/v2, paginated, and the legacy
// /spend/logs by request id), the model catalog (/v1/models merged with
// /model/info), health (/health/liveliness, /health/readiness) and end users
// (/customer/info). It is built on hashicorp/go-retryablehttp: idempotent requests
// are retried on connection errors, 429 and 5xx, honouring Retry-After, within the
// caller's context. Errors are classified for errors.Is: ErrUnauthorized (401, 403),
// errdefs.ErrUnavailable (unreachable, or 429/5xx after retries), errdefs.ErrNotFound,
// ErrMalformed; LiteLLM's error bodies, in both its own
// {"error":{"message","type","param","code"}} shape and FastAPI's {"detail":...},
// become an *APIError.
//
// Spend logs are walked newest first with a time cursor (WalkSpendLogs), so rows
// written while a walk runs cannot shift its pages. The port.SpendReconciler built on
// this client is in adapters/litellmspend.
//
// The package litellmtest provides a fake LiteLLM for tests.
package litellm
