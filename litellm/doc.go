// Package litellm is a client for the management API of a LiteLLM proxy and the
// port.SpendReconciler built on it.
//
// Client reads spend logs (GET /spend/logs/v2, paginated, and the legacy
// /spend/logs by request id), the model catalog (/v1/models merged with
// /model/info), health (/health/liveliness, /health/readiness) and end users
// (/customer/info). It is built on hashicorp/go-retryablehttp: idempotent requests
// are retried on connection errors, 429 and 5xx, honouring Retry-After, within the
// caller's context. Errors are classified for errors.Is: ErrUnauthorized (401, 403),
// port.ErrUnavailable (unreachable, or 429/5xx after retries), port.ErrNotFound,
// ErrMalformed; LiteLLM's error bodies, in both its own
// {"error":{"message","type","param","code"}} shape and FastAPI's {"detail":...},
// become an *APIError.
//
// Reconciler turns the calls a per-run proxy audited into authoritative usage. It
// matches spend rows by request_id or litellm_call_id and requires each row's
// metadata.spend_logs_metadata to name the run and attempt, because LiteLLM's
// end_user filter has been seen returning every user's rows. It polls until every
// call is found, since LiteLLM writes rows in batches, and fails with
// port.ErrUnattributed rather than report a zero bill.
//
// The package litellmtest provides a fake LiteLLM for tests.
package litellm
