package litellm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Reconciler turns a run's audited calls into authoritative usage from LiteLLM's
// spend logs. It implements port.SpendReconciler.
//
// It never trusts LiteLLM's end_user filter (deployments have been seen ignoring it):
// the filter only narrows the query. A row counts for a call only when its request_id
// or litellm_call_id is one the proxy audited for the run AND its
// metadata.spend_logs_metadata carries the run's run_id and attempt. Rows of other
// runs are never counted, a row seen twice counts once, and audited calls without an
// attributable row make Reconcile fail with port.ErrUnattributed, never return a zero
// bill.
type Reconciler struct {
	c   *Client
	cfg reconcilerConfig
}

var _ port.SpendReconciler = (*Reconciler)(nil)

// ReconcilerOption configures a Reconciler.
type ReconcilerOption func(*reconcilerConfig) error

type reconcilerConfig struct {
	minPoll, maxPoll time.Duration
	skew             time.Duration
	pageSize         int
	log              *slog.Logger
}

// WithPollInterval sets the wait between polls: min after the first poll, doubling up
// to max (default 1 s to 15 s). LiteLLM writes spend rows in batches, every 10 s by
// default and often every 60 s in production.
func WithPollInterval(min, max time.Duration) ReconcilerOption {
	return func(c *reconcilerConfig) error {
		if min <= 0 || max < min {
			return port.Invalidf("poll interval must satisfy 0 < min (%s) <= max (%s)", min, max)
		}
		c.minPoll, c.maxPoll = min, max
		return nil
	}
}

// WithClockSkew widens the run's time window by d on both sides (default 2 min), for
// clock differences between the host and LiteLLM.
func WithClockSkew(d time.Duration) ReconcilerOption {
	return func(c *reconcilerConfig) error {
		if d < 0 || d > 24*time.Hour {
			return port.Invalidf("clock skew %s out of range [0, 24h]", d)
		}
		c.skew = d
		return nil
	}
}

// WithPageSize sets the spend-log page size (default MaxPageSize).
func WithPageSize(n int) ReconcilerOption {
	return func(c *reconcilerConfig) error {
		if n < 1 || n > MaxPageSize {
			return port.Invalidf("page size %d out of range [1, %d]", n, MaxPageSize)
		}
		c.pageSize = n
		return nil
	}
}

// WithReconcilerLogger sets the logger (default: the client's).
func WithReconcilerLogger(l *slog.Logger) ReconcilerOption {
	return func(c *reconcilerConfig) error {
		c.log = l
		return nil
	}
}

// NewReconciler returns a reconciler over c. It does no I/O; errors wrap
// port.ErrInvalidSpec.
func NewReconciler(c *Client, opts ...ReconcilerOption) (*Reconciler, error) {
	if c == nil {
		return nil, &port.OpError{Op: "litellm.NewReconciler", Err: port.Invalidf("nil client")}
	}
	cfg := reconcilerConfig{minPoll: time.Second, maxPoll: 15 * time.Second, skew: 2 * time.Minute, pageSize: MaxPageSize}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, &port.OpError{Op: "litellm.NewReconciler", Err: err}
		}
	}
	if cfg.log == nil {
		cfg.log = c.log
	}
	return &Reconciler{c: c, cfg: cfg}, nil
}

// billable is one audited call awaiting its row.
type billable struct {
	key   string // call id, else request id
	found bool
	fact  port.UsageFact
}

// run is the state of one Reconcile.
type run struct {
	req      port.ReconcileRequest
	calls    []billable
	ids      map[string]int // call id and request id -> index in calls
	found    int
	foreign  int // rows with an audited id but another run or attempt
	dups     int
	runBytes []byte
	row      SpendLog // reused while decoding
}

// Reconcile polls LiteLLM until every billable call of req has its row or ctx ends.
// Calls the proxy blocked and calls without a call or request id are not billable.
// Errors: port.ErrInvalidSpec for a bad request; port.ErrUnattributed (with the
// facts found so far and the Missing list) when calls are still missing as ctx ends;
// ErrUnauthorized at once when LiteLLM refuses the key. All come in a *port.OpError.
func (r *Reconciler) Reconcile(ctx context.Context, req port.ReconcileRequest) (*port.Reconciliation, error) {
	fail := func(err error) error { return &port.OpError{Op: "litellm.Reconcile", RunID: req.RunID, Err: err} }
	if err := port.ValidateRunID(req.RunID); err != nil {
		return nil, fail(err)
	}
	if req.Attempt < 0 {
		return nil, fail(port.Invalidf("attempt %d is negative", req.Attempt))
	}
	if !req.Since.IsZero() && !req.Until.IsZero() && req.Until.Before(req.Since) {
		return nil, fail(port.Invalidf("run ends (%s) before it starts (%s)", req.Until, req.Since))
	}
	st := &run{req: req, ids: map[string]int{}, runBytes: []byte(req.RunID)}
	for _, c := range req.Calls {
		if c.Blocked != "" || (c.CallID == "" && c.RequestID == "") {
			continue
		}
		if (c.CallID != "" && st.has(c.CallID)) || (c.RequestID != "" && st.has(c.RequestID)) {
			continue // the same call audited twice is billed once
		}
		key := c.CallID
		if key == "" {
			key = c.RequestID
		}
		i := len(st.calls)
		st.calls = append(st.calls, billable{key: key})
		for _, id := range []string{c.CallID, c.RequestID} {
			if id != "" {
				st.ids[id] = i
			}
		}
	}
	rec := &port.Reconciliation{}
	if len(st.calls) == 0 {
		return rec, nil
	}

	q := SpendLogsQuery{EndUser: req.BillingAccountID, PageSize: r.cfg.pageSize}
	q.Start, q.End = r.window(req)
	log := r.cfg.log.With("run", req.RunID, "attempt", req.Attempt)

	var lastErr error
	legacy := false
	requests := 0
	wait := r.cfg.minPoll
	for round := 1; ; round++ {
		var n int
		var err error
		if legacy {
			n, err = r.pollLegacy(ctx, st)
		} else {
			n, err = r.c.spendPages(ctx, q, st.visit)
			var apiErr *APIError
			if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound {
				// A proxy without /spend/logs/v2: look rows up one by one.
				log.Info("litellm: /spend/logs/v2 not served, using /spend/logs by request id")
				legacy = true
				var m int
				m, err = r.pollLegacy(ctx, st)
				n += m
			}
		}
		requests += n
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if permanent(err) {
				return st.result(rec), fail(err)
			}
			log.Warn("litellm: spend log poll failed, will retry", "round", round, "err", err)
			lastErr = err
		} else {
			lastErr = nil
		}
		if st.found == len(st.calls) {
			break
		}
		log.Debug("litellm: calls still missing", "round", round, "found", st.found, "billable", len(st.calls))
		if !sleep(ctx, wait) {
			break
		}
		wait = min(wait*2, r.cfg.maxPoll)
	}
	log.Debug("litellm: reconciled", "found", st.found, "billable", len(st.calls), "requests", requests,
		"foreign_rows", st.foreign, "duplicate_rows", st.dups)
	st.result(rec)
	if len(rec.Missing) == 0 {
		return rec, nil
	}
	var cause error
	if st.found == 0 {
		cause = fmt.Errorf("%w: none of the %d audited calls has a billing row of run %s attempt %d (%d rows carried an audited id but another run or attempt)",
			port.ErrUnattributed, len(st.calls), req.RunID, req.Attempt, st.foreign)
	} else {
		cause = fmt.Errorf("%w: %d of %d audited calls have no billing row of run %s attempt %d",
			port.ErrUnattributed, len(rec.Missing), len(st.calls), req.RunID, req.Attempt)
	}
	errs := []error{cause}
	if lastErr != nil {
		errs = append(errs, lastErr)
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return rec, fail(errors.Join(errs...))
}

// window is the run's time window, widened by the skew. Without bounds in the
// request it is taken from the audited calls.
func (r *Reconciler) window(req port.ReconcileRequest) (time.Time, time.Time) {
	since, until := req.Since, req.Until
	for _, c := range req.Calls {
		if c.Time.IsZero() {
			continue
		}
		if req.Since.IsZero() && (since.IsZero() || c.Time.Before(since)) {
			since = c.Time
		}
		if end := c.Time.Add(c.Latency); req.Until.IsZero() && end.After(until) {
			until = end
		}
	}
	now := time.Now()
	if until.IsZero() {
		until = now
	}
	if since.IsZero() {
		since = until.Add(-24 * time.Hour)
	}
	return since.Add(-r.cfg.skew), until.Add(r.cfg.skew)
}

func (st *run) has(id string) bool { _, ok := st.ids[id]; return ok }

// visit looks at one raw row; it returns false once every call is found. Rows that
// do not even mention the run id are skipped without decoding, which keeps a page of
// other users' rows nearly free.
func (st *run) visit(raw []byte) bool {
	if !bytes.Contains(raw, st.runBytes) {
		return true
	}
	if st.row.decodeLean(raw) != nil {
		return true // a row we cannot read is not attributable; its call stays missing
	}
	st.consider(&st.row)
	return st.found < len(st.calls)
}

// consider counts l for its call if it belongs to the run.
func (st *run) consider(l *SpendLog) {
	i, ok := st.ids[l.RequestID]
	if !ok && l.LitellmCallID != "" {
		i, ok = st.ids[l.LitellmCallID]
	}
	if !ok {
		return
	}
	runID, attempt, ok := runAttempt(l.SpendLogsMetadata)
	if !ok || runID != st.req.RunID || attempt != st.req.Attempt {
		st.foreign++
		return
	}
	c := &st.calls[i]
	if c.found {
		st.dups++
		return
	}
	c.found = true
	st.found++
	c.fact = port.UsageFact{
		IdempotencyKey: st.req.RunID + "/" + strconv.Itoa(st.req.Attempt) + "/" + c.key,
		RequestID:      l.RequestID, CallID: l.LitellmCallID, Model: l.Model,
		PromptTokens: l.PromptTokens, CompletionTokens: l.CompletionTokens, TotalTokens: l.TotalTokens,
		Spend: l.Spend, StartTime: l.StartTime, EndTime: l.EndTime,
	}
	if c.fact.CallID == "" && c.key != l.RequestID {
		c.fact.CallID = c.key
	}
	if c.fact.TotalTokens == 0 {
		c.fact.TotalTokens = c.fact.PromptTokens + c.fact.CompletionTokens
	}
}

// result fills rec with the facts (in audit order), totals and missing calls.
func (st *run) result(rec *port.Reconciliation) *port.Reconciliation {
	rec.Facts, rec.Missing, rec.Total = nil, nil, port.Usage{}
	for _, c := range st.calls {
		if !c.found {
			rec.Missing = append(rec.Missing, c.key)
			continue
		}
		rec.Facts = append(rec.Facts, c.fact)
		rec.Total.Calls++
		rec.Total.PromptTokens += c.fact.PromptTokens
		rec.Total.CompletionTokens += c.fact.CompletionTokens
		rec.Total.TotalTokens += c.fact.TotalTokens
		rec.Total.Spend += c.fact.Spend
	}
	return rec
}

// pollLegacy looks up each missing call that has a request id through /spend/logs.
func (r *Reconciler) pollLegacy(ctx context.Context, st *run) (requests int, err error) {
	for _, c := range st.req.Calls {
		if c.RequestID == "" {
			continue
		}
		i, ok := st.ids[c.RequestID]
		if !ok || st.calls[i].found {
			continue
		}
		requests++
		l, err := r.c.SpendLogsByRequestID(ctx, c.RequestID)
		if errors.Is(err, port.ErrNotFound) {
			continue
		}
		if err != nil {
			return requests, err
		}
		st.consider(l)
	}
	return requests, nil
}

// permanent reports errors that polling again cannot fix.
func permanent(err error) bool {
	if errors.Is(err, ErrUnauthorized) || errors.Is(err, port.ErrInvalidSpec) {
		return true
	}
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode >= 400 && apiErr.StatusCode < 500 &&
		apiErr.StatusCode != http.StatusTooManyRequests && apiErr.StatusCode != http.StatusNotFound
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
