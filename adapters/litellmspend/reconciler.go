package litellmspend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/internal/ctxsleep"
	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/port"
)

// ErrMisattributed reports audited calls whose spend row names another end user
// than the run's billing account: LiteLLM charged them to someone else. A
// *MisattributedError carries it, and also matches port.ErrUnattributed, since the
// calls are not billed to the run.
var ErrMisattributed = errors.New("misattributed calls")

// MisattributedError lists the audited calls LiteLLM logged under another end user.
type MisattributedError struct {
	// BillingAccountID is the end user the rows should have named.
	BillingAccountID string
	// Calls are the calls (by call id, or request id) in audit order, and EndUsers
	// the end user each one's row names instead.
	Calls, EndUsers []string
}

// Error implements error.
func (e *MisattributedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %d call(s) logged under another end user than %q:", ErrMisattributed, len(e.Calls), e.BillingAccountID)
	for i, c := range e.Calls {
		fmt.Fprintf(&b, " %s (end_user %q)", c, e.EndUsers[i])
	}
	return b.String()
}

// Is matches ErrMisattributed and port.ErrUnattributed.
func (e *MisattributedError) Is(target error) bool {
	return target == ErrMisattributed || target == port.ErrUnattributed
}

// Reconciler turns a run's audited calls into authoritative usage from LiteLLM's
// spend logs. It implements port.SpendReconciler and is safe for concurrent use.
type Reconciler struct {
	c   *litellm.Client
	cfg config
}

var _ port.SpendReconciler = (*Reconciler)(nil)

// Option configures a Reconciler.
type Option func(*config) error

type config struct {
	minPoll, maxPoll time.Duration
	skew             time.Duration
	pageSize         int
	maxRequests      int
	log              *slog.Logger
}

// DefaultMaxRequests bounds the spend-log requests of one Reconcile unless
// WithMaxRequests says otherwise.
const DefaultMaxRequests = 2000

// WithMaxRequests bounds the requests one Reconcile makes to LiteLLM, over all
// its polls (default DefaultMaxRequests): a spend API whose pages never end or
// whose cursor loops ends the reconciliation with a *litellm.WalkLimitError
// (litellm.ErrWalkLimit) instead of running until the deadline.
func WithMaxRequests(n int) Option {
	return func(c *config) error {
		return optcheck.Set(&c.maxRequests, n, n >= 1, "max requests %d is not positive", n)
	}
}

// WithPollInterval sets the wait between polls: min after the first poll, doubling up
// to max (default 1 s to 15 s). LiteLLM writes spend rows in batches, every 10 s by
// default and often every 60 s in production.
func WithPollInterval(min, max time.Duration) Option {
	return func(c *config) error {
		if min <= 0 || max < min {
			return port.Invalidf("poll interval must satisfy 0 < min (%s) <= max (%s)", min, max)
		}
		c.minPoll, c.maxPoll = min, max
		return nil
	}
}

// WithClockSkew widens the run's time window by d on both sides (default 2 min), for
// clock differences between the host and LiteLLM.
func WithClockSkew(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > 24*time.Hour {
			return port.Invalidf("clock skew %s out of range [0, 24h]", d)
		}
		c.skew = d
		return nil
	}
}

// WithPageSize sets the spend-log page size (default litellm.MaxPageSize).
func WithPageSize(n int) Option {
	return func(c *config) error {
		if n < 1 || n > litellm.MaxPageSize {
			return port.Invalidf("page size %d out of range [1, %d]", n, litellm.MaxPageSize)
		}
		c.pageSize = n
		return nil
	}
}

// WithLogger sets the logger (default: discard). A nil logger means discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		c.log = l
		return nil
	}
}

// NewReconciler returns a reconciler reading through c. It does no I/O; errors wrap
// port.ErrInvalidSpec.
func NewReconciler(c *litellm.Client, opts ...Option) (*Reconciler, error) {
	if c == nil {
		return nil, &port.OpError{Op: "litellmspend.NewReconciler", Err: port.Invalidf("nil client")}
	}
	cfg := config{minPoll: time.Second, maxPoll: 15 * time.Second, skew: 2 * time.Minute, pageSize: litellm.MaxPageSize, maxRequests: DefaultMaxRequests}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, &port.OpError{Op: "litellmspend.NewReconciler", Err: err}
		}
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{c: c, cfg: cfg}, nil
}

// billable is one audited call awaiting its row.
type billable struct {
	key    string // call id, else request id
	at     time.Time
	until  time.Time
	found  bool
	fact   port.UsageFact
	wrong  bool   // a row of the run exists, under another end user
	wrongU string // that end user
	model  string // the audited model
	bad    bool   // its only row has an impossible value
}

// run is the state of one Reconcile.
type run struct {
	req     port.ReconcileRequest
	calls   []billable
	ids     map[string]int // call id and request id -> index in calls
	found   int
	wrong   int // calls with only misattributed rows
	foreign int // rows with an audited id but another run or attempt
	dups    int
	// probed counts the rows whose end_user was looked at to learn whether the
	// server applies the end_user filter; otherUser is set once one did not match.
	probed    int
	otherUser bool
	runBytes  []byte
	row       litellm.SpendLog // reused while decoding
	bad       []error          // *litellm.BadRowError, one per call
	total     port.Usage       // of the rows counted so far, kept from overflowing
	anomalies []port.RowAnomaly
	seenAnom  map[string]bool
	requests  int // made so far, over every poll
	maxReq    int
}

// settled reports whether every call has a row, right or misattributed.
func (st *run) settled() bool { return st.found+st.wrong+len(st.bad) == len(st.calls) }

// Reconcile polls LiteLLM until every billable call of req has its row or ctx ends.
// Calls the proxy blocked and calls without a call or request id are not billable.
//
// Errors, all in a *port.OpError: port.ErrInvalidSpec for a bad request;
// port.ErrUnattributed (with the facts found so far and the Missing list) when calls
// are still missing as ctx ends; a *MisattributedError (ErrMisattributed, also
// port.ErrUnattributed) when a call's row names another end user than
// req.BillingAccountID, those calls being listed in Missing too; litellm.ErrUnauthorized
// at once when LiteLLM refuses the key; a *litellm.WalkLimitError (litellm.ErrWalkLimit)
// at once when the polls have made WithMaxRequests requests (a spend API whose pages
// never end or whose cursor loops); a *litellm.BadRowError (litellm.ErrBadRow) naming
// each row with an impossible value (a spend that is not a finite non-negative number,
// a token count that is not a non-negative integer, a row that would make the run's
// total spend infinite or a token total overflow): such a row is never billed, its
// call is listed in Missing and not waited for. Rows billed but worth a look (a model
// other than the audited call's, a second row with other values for one call) are
// listed in the result's Anomalies; the first row found is the one billed.
func (r *Reconciler) Reconcile(ctx context.Context, req port.ReconcileRequest) (*port.Reconciliation, error) {
	fail := func(err error) error { return &port.OpError{Op: "litellmspend.Reconcile", RunID: req.RunID, Err: err} }
	if err := port.ValidateRunID(req.RunID); err != nil {
		return nil, fail(err)
	}
	if req.Attempt < 0 {
		return nil, fail(port.Invalidf("attempt %d is negative", req.Attempt))
	}
	if !req.Since.IsZero() && !req.Until.IsZero() && req.Until.Before(req.Since) {
		return nil, fail(port.Invalidf("run ends (%s) before it starts (%s)", req.Until, req.Since))
	}
	st := newRun(req)
	st.maxReq = r.cfg.maxRequests
	rec := &port.Reconciliation{}
	if len(st.calls) == 0 {
		return rec, nil
	}

	q := litellm.SpendLogsQuery{EndUser: req.BillingAccountID, PageSize: r.cfg.pageSize, OnRequest: func() { st.requests++ }}
	q.Start, q.End = r.window(req)
	log := r.cfg.log.With("run", req.RunID, "attempt", req.Attempt)

	var lastErr error
	legacy := false
	wait := r.cfg.minPoll
	for round := 1; ; round++ {
		var err error
		if legacy {
			err = r.pollLegacy(ctx, st)
		} else {
			err = r.poll(ctx, q, st)
			var apiErr *litellm.APIError
			if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound {
				// A proxy without /spend/logs/v2: look rows up one by one.
				log.Info("litellmspend: /spend/logs/v2 not served, using /spend/logs by request id")
				legacy = true
				err = r.pollLegacy(ctx, st)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if permanent(err) {
				return st.result(rec), fail(err)
			}
			log.Warn("litellmspend: spend log poll failed, will retry", "round", round, "err", err)
			lastErr = err
		} else {
			lastErr = nil
		}
		if st.settled() {
			break
		}
		log.Debug("litellmspend: calls still missing", "round", round, "found", st.found, "billable", len(st.calls))
		if !ctxsleep.Sleep(ctx, wait) {
			break
		}
		wait = min(wait*2, r.cfg.maxPoll)
	}
	log.Debug("litellmspend: reconciled", "found", st.found, "misattributed", st.wrong, "billable", len(st.calls),
		"foreign_rows", st.foreign, "duplicate_rows", st.dups)
	st.result(rec)
	if len(rec.Missing) == 0 {
		return rec, nil
	}
	return rec, fail(st.missingError(rec, lastErr, ctx.Err()))
}

// newRun is the reconciliation state of req: its billable calls (not blocked, with
// a call or request id, each call once however often it was audited).
func newRun(req port.ReconcileRequest) *run {
	st := &run{req: req, ids: map[string]int{}, runBytes: []byte(req.RunID), seenAnom: map[string]bool{}}
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
		st.calls = append(st.calls, billable{key: key, at: c.Time, until: c.Time.Add(c.Latency), model: c.Model})
		for _, id := range []string{c.CallID, c.RequestID} {
			if id != "" {
				st.ids[id] = i
			}
		}
	}
	return st
}

// missingError explains the calls rec still misses: absent ones (port.ErrUnattributed),
// misattributed ones (*MisattributedError), the last poll error and ctxErr when
// the wait ended unsettled.
func (st *run) missingError(rec *port.Reconciliation, lastErr, ctxErr error) error {
	req := st.req
	var errs []error
	errs = append(errs, st.bad...)
	if absent := len(rec.Missing) - st.wrong - len(st.bad); absent > 0 {
		if st.found == 0 && st.wrong == 0 {
			errs = append(errs, fmt.Errorf("%w: none of the %d audited calls has a billing row of run %s attempt %d (%d rows carried an audited id but another run or attempt)",
				port.ErrUnattributed, len(st.calls), req.RunID, req.Attempt, st.foreign))
		} else {
			errs = append(errs, fmt.Errorf("%w: %d of %d audited calls have no billing row of run %s attempt %d",
				port.ErrUnattributed, absent, len(st.calls), req.RunID, req.Attempt))
		}
	}
	if st.wrong > 0 {
		me := &MisattributedError{BillingAccountID: req.BillingAccountID}
		for _, c := range st.calls {
			if c.wrong && !c.found {
				me.Calls = append(me.Calls, c.key)
				me.EndUsers = append(me.EndUsers, c.wrongU)
			}
		}
		errs = append(errs, me)
	}
	if lastErr != nil {
		errs = append(errs, lastErr)
	}
	if ctxErr != nil && !st.settled() {
		errs = append(errs, ctxErr)
	}
	return errors.Join(errs...)
}

// poll walks the run's window with the end_user filter, then, if calls are still
// unsettled, walks their part of the window without it: a row under another end
// user must be found (and reported) whether or not the server applies the filter.
//
// A server that returned another end user's row ignores the filter, so its walk
// already covered every row of the window and the second walk is skipped.
func (r *Reconciler) poll(ctx context.Context, q litellm.SpendLogsQuery, st *run) error {
	st.probed, st.otherUser = 0, false
	if err := r.walk(ctx, q, st); err != nil || st.settled() || q.EndUser == "" || st.otherUser {
		return err
	}
	var since, until time.Time
	untimed := false
	for _, c := range st.calls {
		if c.found || c.wrong {
			continue
		}
		if c.at.IsZero() {
			untimed = true // only the run's whole window holds its row for sure
			break
		}
		if since.IsZero() || c.at.Before(since) {
			since = c.at
		}
		if c.until.After(until) {
			until = c.until
		}
	}
	if !untimed && !since.IsZero() {
		// The unsettled calls' own times, widened by the skew, within the run's window.
		q.Start = later(q.Start, since.Add(-r.cfg.skew))
		q.End = earlier(q.End, until.Add(r.cfg.skew))
		if q.End.Before(q.Start) {
			return nil
		}
	}
	q.EndUser = ""
	return r.walk(ctx, q, st)
}

// walk walks q with what is left of the Reconcile's request limit.
func (r *Reconciler) walk(ctx context.Context, q litellm.SpendLogsQuery, st *run) error {
	q.MaxRequests = st.maxReq - st.requests
	if q.MaxRequests <= 0 {
		return &litellm.WalkLimitError{Path: "/spend/logs/v2", Requests: st.requests}
	}
	err := r.c.WalkSpendLogs(ctx, q, st.visit)
	var wl *litellm.WalkLimitError
	if errors.As(err, &wl) {
		wl.Requests = st.requests // over the whole Reconcile
	}
	return err
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
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

// maxProbe is how many rows of a walk are checked for another end user.
const maxProbe = 8

func (st *run) has(id string) bool { _, ok := st.ids[id]; return ok }

// visit looks at one raw row; it returns false once every call is settled. Rows that
// do not even mention the run id are skipped without decoding, which keeps a page of
// other users' rows nearly free.
func (st *run) visit(raw litellm.RawSpendLog) bool {
	if !st.otherUser && st.probed < maxProbe {
		st.probed++
		st.otherUser = raw.EndUser() != st.req.BillingAccountID
	}
	if !bytes.Contains(raw, st.runBytes) {
		return true
	}
	if raw.Decode(&st.row) != nil {
		return true // a row we cannot read is not attributable; its call stays missing
	}
	st.consider(&st.row)
	return !st.settled()
}

// consider counts l for its call if it belongs to the run and its billing account.
func (st *run) consider(l *litellm.SpendLog) {
	i, ok := st.ids[l.RequestID]
	if !ok && l.LitellmCallID != "" {
		i, ok = st.ids[l.LitellmCallID]
	}
	if !ok {
		return
	}
	runID, attempt, ok := l.RunAttempt()
	if !ok || runID != st.req.RunID || attempt != st.req.Attempt {
		st.foreign++
		return
	}
	c := &st.calls[i]
	if c.bad {
		return
	}
	if c.found {
		if f := c.fact; l.RequestID != f.RequestID || l.Spend != f.Spend || l.TotalTokens != f.TotalTokens && l.TotalTokens != 0 ||
			l.PromptTokens != f.PromptTokens || l.CompletionTokens != f.CompletionTokens {
			st.dups++
			st.anomaly(port.RowAnomaly{Call: c.key, RequestID: l.RequestID, Kind: port.AnomalyDuplicateRow,
				Audited: fmt.Sprintf("billed row %s: spend %g, %d tokens", f.RequestID, f.Spend, f.TotalTokens),
				Row:     fmt.Sprintf("spend %g, %d tokens", l.Spend, max(l.TotalTokens, l.PromptTokens+l.CompletionTokens))})
		}
		return
	}
	err := l.Check()
	if err == nil && l.EndUser == st.req.BillingAccountID {
		err = st.add(l)
	}
	if err != nil {
		// An impossible value is neither billed nor waited for: the row is named
		// in the error.
		c.bad = true
		st.bad = append(st.bad, err)
		if c.wrong {
			c.wrong = false
			st.wrong--
		}
		return
	}
	if l.EndUser != st.req.BillingAccountID {
		// The run's call, charged to someone else: never counted for the run.
		if !c.wrong {
			c.wrong, c.wrongU = true, l.EndUser
			st.wrong++
		}
		return
	}
	if c.wrong {
		c.wrong = false
		st.wrong--
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
	// The row's model group is the model the call named (its model the
	// deployment's); either matching the audit is a match.
	if c.model != "" && l.ModelGroup != c.model && l.Model != c.model {
		rowModel := l.ModelGroup
		if rowModel == "" {
			rowModel = l.Model
		}
		st.anomaly(port.RowAnomaly{Call: c.key, RequestID: l.RequestID, Kind: port.AnomalyModelMismatch, Audited: c.model, Row: rowModel})
	}
}

// add counts a sound row of the run in the running total, or returns a
// *litellm.BadRowError when the total would overflow: each row is finite and
// under 2^53 tokens, but two rows of 1e308 USD sum to +Inf and 1,025 rows of
// 2^53 tokens to a negative count. The row that would overflow is not billed.
func (st *run) add(l *litellm.SpendLog) error {
	tokens := l.TotalTokens
	if tokens == 0 {
		tokens = l.PromptTokens + l.CompletionTokens // each at most 2^53
	}
	t := st.total
	bad := func(field string, v any) error {
		return &litellm.BadRowError{RequestID: l.RequestID, LitellmCallID: l.LitellmCallID, Field: field + " (run total)", Value: fmt.Sprint(v)}
	}
	switch {
	case math.IsInf(t.Spend+l.Spend, 0):
		return bad("spend", l.Spend)
	case l.PromptTokens > math.MaxInt64-t.PromptTokens:
		return bad("prompt_tokens", l.PromptTokens)
	case l.CompletionTokens > math.MaxInt64-t.CompletionTokens:
		return bad("completion_tokens", l.CompletionTokens)
	case tokens > math.MaxInt64-t.TotalTokens:
		return bad("total_tokens", tokens)
	}
	st.total.Spend += l.Spend
	st.total.PromptTokens += l.PromptTokens
	st.total.CompletionTokens += l.CompletionTokens
	st.total.TotalTokens += tokens
	return nil
}

// anomaly records a once.
func (st *run) anomaly(a port.RowAnomaly) {
	k := a.Kind + "\x00" + a.Call + "\x00" + a.RequestID + "\x00" + a.Row
	if !st.seenAnom[k] {
		st.seenAnom[k] = true
		st.anomalies = append(st.anomalies, a)
	}
}

// result fills rec with the facts (in audit order), totals and missing calls
// (misattributed ones included: nothing is billed to the run for them).
func (st *run) result(rec *port.Reconciliation) *port.Reconciliation {
	rec.Facts, rec.Missing, rec.Total = nil, nil, port.Usage{}
	rec.Anomalies = append([]port.RowAnomaly(nil), st.anomalies...)
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

// pollLegacy looks up each unsettled call that has a request id through /spend/logs.
func (r *Reconciler) pollLegacy(ctx context.Context, st *run) error {
	for _, c := range st.req.Calls {
		if c.RequestID == "" {
			continue
		}
		i, ok := st.ids[c.RequestID]
		if !ok || st.calls[i].found || st.calls[i].wrong {
			continue
		}
		if st.requests >= st.maxReq {
			return &litellm.WalkLimitError{Path: "/spend/logs", Requests: st.requests}
		}
		st.requests++
		l, err := r.c.SpendLogsByRequestID(ctx, c.RequestID)
		if errors.Is(err, port.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		st.consider(l)
	}
	return nil
}

// permanent reports errors that polling again cannot fix.
func permanent(err error) bool {
	if errors.Is(err, litellm.ErrUnauthorized) || errors.Is(err, port.ErrInvalidSpec) || errors.Is(err, litellm.ErrWalkLimit) {
		return true
	}
	var apiErr *litellm.APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode >= 400 && apiErr.StatusCode < 500 &&
		!slices.Contains([]int{http.StatusTooManyRequests, http.StatusNotFound}, apiErr.StatusCode)
}
