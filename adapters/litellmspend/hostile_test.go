package litellmspend_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/port"
)

// hostileSpendAPI serves /spend/logs/v2 pages that page(n) writes (raw JSON
// rows) and counts the requests.
func hostileSpendAPI(t *testing.T, page func(n int) (rows []string, totalPages int)) (*litellm.Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/spend/logs/v2" {
			http.NotFound(w, r)
			return
		}
		rows, pages := page(int(n.Add(1)))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data":[%s],"total":%d,"page":1,"page_size":%d,"total_pages":%d,"total_is_capped":false}`,
			strings.Join(rows, ","), len(rows), len(rows), pages)
	}))
	t.Cleanup(srv.Close)
	c, err := litellm.New(litellm.WithBaseURL(srv.URL), litellm.WithMasterKey("sk-test"), litellm.WithRetry(0, time.Millisecond, time.Millisecond))
	require.NoError(t, err)
	return c, &n
}

// row is one spend row of run "run-h" attempt 1 for acct-1, with extra raw
// fields (overriding the defaults).
func row(id string, at time.Time, fields ...string) string {
	f := map[string]string{
		"request_id": fmt.Sprintf("%q", id), "litellm_call_id": fmt.Sprintf("%q", "call-"+id), "spend": "0.01",
		"prompt_tokens": "7", "completion_tokens": "2", "total_tokens": "9", "model": `"gpt-4o-mini"`,
		"model_group": `"gpt-4o-mini"`, "end_user": `"acct-1"`, "status": `"success"`,
		"startTime": fmt.Sprintf("%q", at.UTC().Format(time.RFC3339Nano)), "endTime": fmt.Sprintf("%q", at.UTC().Format(time.RFC3339Nano)),
		"metadata": `{"spend_logs_metadata":{"run_id":"run-h","attempt":1}}`,
	}
	for i := 0; i+1 < len(fields); i += 2 {
		f[fields[i]] = fields[i+1]
	}
	var parts []string
	for k, v := range f {
		parts = append(parts, fmt.Sprintf("%q:%s", k, v))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func audited(id string, at time.Time) port.AuditRecord {
	return port.AuditRecord{Time: at, RunID: "run-h", Attempt: 1, Method: "POST", Path: "/v1/chat/completions",
		Status: 200, Model: "gpt-4o-mini", CallID: "call-" + id, RequestID: id, Latency: time.Millisecond}
}

func hostileReconciler(t *testing.T, c *litellm.Client, opts ...litellmspend.Option) *litellmspend.Reconciler {
	t.Helper()
	r, err := litellmspend.NewReconciler(c, append([]litellmspend.Option{litellmspend.WithPollInterval(time.Millisecond, 2*time.Millisecond), litellmspend.WithPageSize(3)}, opts...)...)
	require.NoError(t, err)
	return r
}

// A spend API whose pages never end (every page full of new rows within one
// second) stops the reconciliation at its request limit with a typed error,
// long before the caller's deadline.
func TestReconcileBoundsPagesThatNeverEnd(t *testing.T) {
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	c, n := hostileSpendAPI(t, func(k int) ([]string, int) {
		return []string{row(fmt.Sprintf("other-%d-a", k), at, "end_user", `"x"`), row(fmt.Sprintf("other-%d-b", k), at, "end_user", `"x"`),
			row(fmt.Sprintf("other-%d-c", k), at, "end_user", `"x"`)}, 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := hostileReconciler(t, c).Reconcile(ctx, port.ReconcileRequest{RunID: "run-h", Attempt: 1, BillingAccountID: "acct-1",
		Calls: []port.AuditRecord{audited("chatcmpl-1", at)}})
	var wl *litellm.WalkLimitError
	require.ErrorAs(t, err, &wl, "err = %v", err)
	assert.ErrorIs(t, err, litellm.ErrWalkLimit)
	assert.LessOrEqual(t, n.Load(), int64(litellmspend.DefaultMaxRequests), "requests made")
	assert.Less(t, time.Since(start), 15*time.Second, "the walk ran until the deadline")
	assert.Equal(t, litellmspend.DefaultMaxRequests, wl.Requests)

	// A smaller limit is honoured over several polls.
	n.Store(0)
	_, err = hostileReconciler(t, c, litellmspend.WithMaxRequests(25)).Reconcile(ctx, port.ReconcileRequest{RunID: "run-h", Attempt: 1,
		BillingAccountID: "acct-1", Calls: []port.AuditRecord{audited("chatcmpl-1", at)}})
	assert.ErrorIs(t, err, litellm.ErrWalkLimit)
	assert.LessOrEqual(t, n.Load(), int64(25))
}

// Impossible values are refused with a typed error naming the row, never
// summed; model mismatches and a second, different row for one call are
// reported in the result.
func TestReconcileRefusesImpossibleValuesAndReportsAnomalies(t *testing.T) {
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	rows := []string{
		row("chatcmpl-neg", at, "spend", "-1"),
		row("chatcmpl-nan", at, "spend", `"NaN"`),
		row("chatcmpl-inf", at, "spend", "2e308"),
		row("chatcmpl-negtok", at, "prompt_tokens", "-5"),
		row("chatcmpl-frac", at, "total_tokens", "1.5"),
		row("chatcmpl-model", at, "model", `"gpt-4o"`, "model_group", `"gpt-4o"`),
		row("chatcmpl-dup", at, "spend", "0.2"),
		row("chatcmpl-dup-2", at, "litellm_call_id", `"call-chatcmpl-dup"`, "spend", "9.0"),
		row("chatcmpl-ok", at),
	}
	c, _ := hostileSpendAPI(t, func(int) ([]string, int) { return rows, 1 })
	ids := []string{"chatcmpl-neg", "chatcmpl-nan", "chatcmpl-inf", "chatcmpl-negtok", "chatcmpl-frac", "chatcmpl-model", "chatcmpl-dup", "chatcmpl-ok"}
	var calls []port.AuditRecord
	for _, id := range ids {
		calls = append(calls, audited(id, at))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := litellmspend.NewReconciler(c, litellmspend.WithPollInterval(time.Millisecond, 2*time.Millisecond))
	require.NoError(t, err)
	rec, err := r.Reconcile(ctx, port.ReconcileRequest{RunID: "run-h", Attempt: 1, BillingAccountID: "acct-1", Calls: calls})
	require.ErrorIs(t, err, litellm.ErrBadRow)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "bad rows are not waited for")
	bad := map[string]string{}
	for _, e := range flatten(err) {
		var br *litellm.BadRowError
		if errors.As(e, &br) {
			bad[br.RequestID] = br.Field + "=" + br.Value
		}
	}
	assert.Equal(t, map[string]string{"chatcmpl-neg": "spend=-1", "chatcmpl-nan": `spend="NaN"`, "chatcmpl-inf": "spend=2e308",
		"chatcmpl-negtok": "prompt_tokens=-5", "chatcmpl-frac": "total_tokens=1.5"}, bad)
	require.NotNil(t, rec)
	assert.ElementsMatch(t, []string{"call-chatcmpl-neg", "call-chatcmpl-nan", "call-chatcmpl-inf", "call-chatcmpl-negtok", "call-chatcmpl-frac"}, rec.Missing)
	assert.Len(t, rec.Facts, 3)
	assert.False(t, math.IsNaN(rec.Total.Spend) || math.IsInf(rec.Total.Spend, 0) || rec.Total.Spend < 0, "total spend %v", rec.Total.Spend)
	kinds := map[string]port.RowAnomaly{}
	for _, a := range rec.Anomalies {
		kinds[a.Kind+" "+a.Call] = a
	}
	require.Len(t, rec.Anomalies, 2, "anomalies: %+v", rec.Anomalies)
	m := kinds[port.AnomalyModelMismatch+" call-chatcmpl-model"]
	assert.Equal(t, "gpt-4o-mini", m.Audited)
	assert.Equal(t, "gpt-4o", m.Row)
	d := kinds[port.AnomalyDuplicateRow+" call-chatcmpl-dup"]
	assert.NotEmpty(t, d.RequestID)
	assert.Contains(t, d.Audited+" "+d.Row, "spend 9")
	assert.Contains(t, d.Audited+" "+d.Row, "spend 0.2")
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	if u := errors.Unwrap(err); u != nil {
		return append([]error{err}, flatten(u)...)
	}
	return []error{err}
}

// Rows sound one by one whose sum is not: two of 1e308 USD (+Inf together) and
// 1,024 of 2^53 tokens (2^63: past int64) are refused at the row that would overflow
// the run's total, with a typed error naming it; the totals stay finite and
// positive and equal the sum of the facts.
func TestReconcileTotalsDoNotOverflow(t *testing.T) {
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	for _, tc := range []struct {
		name   string
		n      int
		fields []string
		field  string
	}{
		{"spend", 2, []string{"spend", "1e308"}, "spend (run total)"},
		{"tokens", 1024, []string{"prompt_tokens", "9007199254740992", "completion_tokens", "0", "total_tokens", "9007199254740992"}, "prompt_tokens (run total)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rows []string
			var calls []port.AuditRecord
			for i := range tc.n {
				id := fmt.Sprintf("chatcmpl-%d", i)
				rows = append(rows, row(id, at, tc.fields...))
				calls = append(calls, audited(id, at))
			}
			c, _ := hostileSpendAPI(t, func(int) ([]string, int) { return rows, 1 })
			r, err := litellmspend.NewReconciler(c, litellmspend.WithPollInterval(time.Millisecond, 2*time.Millisecond), litellmspend.WithPageSize(500))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rec, err := r.Reconcile(ctx, port.ReconcileRequest{RunID: "run-h", Attempt: 1, BillingAccountID: "acct-1", Calls: calls})
			require.ErrorIs(t, err, litellm.ErrBadRow)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "an overflowing row is not waited for")
			var br *litellm.BadRowError
			require.ErrorAs(t, err, &br)
			assert.Equal(t, tc.field, br.Field)
			require.NotNil(t, rec)
			assert.Equal(t, []string{fmt.Sprintf("call-chatcmpl-%d", tc.n-1)}, rec.Missing, "the row that would overflow is not billed")
			assert.Equal(t, tc.n-1, len(rec.Facts))
			assert.False(t, math.IsInf(rec.Total.Spend, 0) || math.IsNaN(rec.Total.Spend), "total spend %v", rec.Total.Spend)
			assert.Positive(t, rec.Total.PromptTokens)
			assert.Positive(t, rec.Total.TotalTokens)
			var spend float64
			var tokens int64
			for _, f := range rec.Facts {
				spend += f.Spend
				tokens += f.TotalTokens
			}
			assert.Equal(t, spend, rec.Total.Spend)
			assert.Equal(t, tokens, rec.Total.TotalTokens)
		})
	}
}
