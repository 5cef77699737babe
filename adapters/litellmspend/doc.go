// Package litellmspend is the port.SpendReconciler backed by LiteLLM's spend logs:
// it turns the calls a per-run proxy audited into authoritative usage, read through
// a litellm.Client.
//
// A spend row counts for an audited call only when its request_id or
// litellm_call_id is the call's, its metadata.spend_logs_metadata names the run and
// attempt, and its end_user is the run's billing account. The end_user filter sent
// to LiteLLM only narrows the query: deployments have been seen ignoring it, so every
// row is checked, and a call whose only row sits under another end user is reported
// as misattributed (ErrMisattributed) whether the server applied the filter or not.
// Rows are written in batches, so Reconcile polls until every call is settled, and it
// fails with port.ErrUnattributed rather than report a zero bill.
package litellmspend
