package port

import (
	"context"
	"time"
)

// SpendReconciler turns a run's audited LLM calls into authoritative usage from the
// billing system (LiteLLM's spend logs).
//
// Reconcile polls until every audited call is found or ctx ends. Calls still missing
// then are listed in Reconciliation.Missing and the error wraps ErrUnattributed; the
// facts found so far are returned with it. A run with audited calls and no attributable
// rows at all is always an error, never a zero bill.
type SpendReconciler interface {
	Reconcile(ctx context.Context, req ReconcileRequest) (*Reconciliation, error)
}

// ReconcileRequest identifies a run and the calls its proxy audited.
type ReconcileRequest struct {
	RunID            string
	Attempt          int
	BillingAccountID string
	// Since and Until bound the run in time; the reconciler widens them a little for
	// clock skew.
	Since, Until time.Time
	// Calls are the proxy's audit records; those without a CallID or RequestID, and
	// those the proxy blocked, are not billable and are skipped.
	Calls []AuditRecord
}

// UsageFact is the billed usage of one call.
type UsageFact struct {
	// IdempotencyKey is "runID/attempt/callID": stable across reconciliations.
	IdempotencyKey   string
	RequestID        string
	CallID           string
	Model            string
	PromptTokens     int64
	CompletionTokens int64
	TotalTokens      int64
	// Spend is the cost in the billing system's currency (USD for LiteLLM).
	Spend     float64
	StartTime time.Time
	EndTime   time.Time
}

// Usage totals a run.
type Usage struct {
	Calls            int
	PromptTokens     int64
	CompletionTokens int64
	TotalTokens      int64
	Spend            float64
}

// Reconciliation is a run's billed usage.
type Reconciliation struct {
	Facts []UsageFact
	Total Usage
	// Missing lists the audited calls (by call id, or request id) with no billing row.
	Missing []string
	// Anomalies lists rows that were not billed as they came: a row whose model
	// is not the audited call's, a second row for one call. The fact billed is
	// the first row found; the host decides what the anomaly means.
	Anomalies []RowAnomaly
}

// Kinds of RowAnomaly.
const (
	// AnomalyModelMismatch: the row's model (its model group, else its model)
	// is not the model the audited call asked for.
	AnomalyModelMismatch = "model_mismatch"
	// AnomalyDuplicateRow: a call has another row with different values.
	AnomalyDuplicateRow = "duplicate_row"
)

// RowAnomaly is a spend row a reconciler reports instead of billing silently.
type RowAnomaly struct {
	// Call is the audited call (call id, or request id); RequestID the row.
	Call, RequestID string
	// Kind is AnomalyModelMismatch or AnomalyDuplicateRow.
	Kind string
	// Audited and Row are the differing values (the models; for a duplicate,
	// the billed row's and this row's spend and tokens).
	Audited, Row string
}
