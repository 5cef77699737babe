package litellmspend_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

type callSpec struct {
	endUser  string
	run      string
	attempt  int
	stream   bool
	metadata string // overrides the spend-logs metadata header when set
}

// chat makes one call the way the per-run proxy does (injected attribution headers)
// and returns the proxy's audit record of it.
func chat(t testing.TB, s *litellmtest.Server, c callSpec) port.AuditRecord {
	t.Helper()
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:` + c.run + `"}]`
	if c.stream {
		body += `,"stream":true,"stream_options":{"include_usage":true}`
	}
	req, err := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(body+"}"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.MasterKey())
	req.Header.Set("x-litellm-end-user-id", c.endUser)
	md := c.metadata
	if md == "" {
		md = fmt.Sprintf(`{"run_id":%q,"attempt":%d,"user_id":"u-1"}`, c.run, c.attempt)
	}
	req.Header.Set("x-litellm-spend-logs-metadata", md)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	rec := port.AuditRecord{Time: start, RunID: c.run, Attempt: c.attempt, Method: "POST", Path: "/v1/chat/completions",
		Status: resp.StatusCode, Model: "gpt-4o-mini", Streamed: c.stream, CallID: resp.Header.Get("x-litellm-call-id"),
		ResponseCost: resp.Header.Get("x-litellm-response-cost")}
	var id struct {
		ID string `json:"id"`
	}
	if c.stream {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && id.ID == "" && d != "[DONE]" {
				require.NoError(t, json.Unmarshal([]byte(d), &id))
			}
		}
	} else {
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &id))
	}
	rec.RequestID = id.ID
	rec.Latency = time.Since(start)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return rec
}

func newFake(t *testing.T, opts ...litellmtest.Option) *litellmtest.Server {
	t.Helper()
	s := litellmtest.NewServer(opts...)
	t.Cleanup(s.Close)
	return s
}

func newReconciler(t testing.TB, s *litellmtest.Server, opts ...litellmspend.Option) *litellmspend.Reconciler {
	t.Helper()
	c, err := litellm.New(litellm.WithBaseURL(s.URL), litellm.WithMasterKey(s.MasterKey()),
		litellm.WithRetry(2, time.Millisecond, 2*time.Millisecond))
	require.NoError(t, err)
	r, err := litellmspend.NewReconciler(c, append([]litellmspend.Option{litellmspend.WithPollInterval(5*time.Millisecond, 20*time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	return r
}

func request(run string, attempt int, calls ...port.AuditRecord) port.ReconcileRequest {
	return port.ReconcileRequest{RunID: run, Attempt: attempt, BillingAccountID: "acct-1", Calls: calls}
}

// rowsOf returns the fake's rows of a run, by request id.
func rowsOf(s *litellmtest.Server, run string) map[string]litellmtest.SpendRow {
	out := map[string]litellmtest.SpendRow{}
	for _, r := range s.SpendRows() {
		if md, _ := r.Metadata["spend_logs_metadata"].(map[string]any); md["run_id"] == run {
			out[r.RequestID] = r
		}
	}
	return out
}

func TestReconcile(t *testing.T) {
	s := newFake(t)
	r := newReconciler(t, s)
	calls := []port.AuditRecord{
		chat(t, s, callSpec{endUser: "acct-1", run: "run-a", attempt: 1}),
		chat(t, s, callSpec{endUser: "acct-1", run: "run-a", attempt: 1, stream: true}),
		chat(t, s, callSpec{endUser: "acct-1", run: "run-a", attempt: 1}),
		{Blocked: "budget", RunID: "run-a"},              // never reached LiteLLM
		{Status: 502, Error: "upstream unreachable"},     // no ids: not billable
		{CallID: "blocked-call-id", Blocked: "bad path"}, // blocked even with an id
	}
	rec, err := r.Reconcile(context.Background(), request("run-a", 1, calls...))
	require.NoError(t, err)
	require.Len(t, rec.Facts, 3)
	assert.Empty(t, rec.Missing)

	rows := rowsOf(s, "run-a")
	var want port.Usage
	for i, f := range rec.Facts {
		row, ok := rows[f.RequestID]
		require.True(t, ok, "fact %d comes from a row of the run", i)
		assert.Equal(t, calls[i].RequestID, f.RequestID, "facts follow the audit order")
		assert.Equal(t, calls[i].CallID, f.CallID)
		assert.Equal(t, "run-a/1/"+calls[i].CallID, f.IdempotencyKey)
		assert.Equal(t, row.Model, f.Model)
		assert.Equal(t, int64(row.PromptTokens), f.PromptTokens)
		assert.Equal(t, int64(row.CompletionTokens), f.CompletionTokens)
		assert.Equal(t, int64(row.TotalTokens), f.TotalTokens)
		assert.InDelta(t, row.Spend, f.Spend, 1e-15)
		assert.WithinDuration(t, row.StartTime, f.StartTime, time.Microsecond)
		want.Calls++
		want.PromptTokens += f.PromptTokens
		want.CompletionTokens += f.CompletionTokens
		want.TotalTokens += f.TotalTokens
		want.Spend += row.Spend
	}
	assert.Equal(t, want.Calls, rec.Total.Calls)
	assert.Equal(t, want.TotalTokens, rec.Total.TotalTokens)
	assert.InDelta(t, want.Spend, rec.Total.Spend, 1e-12)
	assert.Greater(t, rec.Total.Spend, 0.0)

	q := s.Requests()[len(s.Requests())-1].Query()
	assert.Equal(t, "acct-1", q.Get("end_user"), "the query is narrowed by end user")
	assert.Equal(t, 1, s.RequestCount("/spend/logs/v2"), "one page had everything")
}

func TestReconcileRowsAppearLater(t *testing.T) {
	s := newFake(t, litellmtest.WithBatchWriteDelay(150*time.Millisecond))
	r := newReconciler(t, s)
	calls := []port.AuditRecord{
		chat(t, s, callSpec{endUser: "acct-1", run: "run-late"}),
		chat(t, s, callSpec{endUser: "acct-1", run: "run-late", stream: true}),
	}
	rec, err := r.Reconcile(context.Background(), request("run-late", 0, calls...))
	require.NoError(t, err)
	assert.Len(t, rec.Facts, 2)
	assert.Greater(t, s.RequestCount("/spend/logs/v2"), 1, "it polled until the batch write")
}

func TestReconcileIgnoresForeignRows(t *testing.T) {
	s := newFake(t)
	s.IgnoreEndUserFilter(true) // the server returns every user's rows
	base := time.Now().Add(-30 * time.Second)
	s.Synthesize(2500, base, 10*time.Millisecond, "acct-2", "acct-3")

	// A concurrent run of the same end user, and a run of another user.
	var mu sync.Mutex
	var mine []port.AuditRecord
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % 3 {
			case 0:
				rec := chat(t, s, callSpec{endUser: "acct-1", run: "run-x", attempt: 0, stream: i == 3})
				mu.Lock()
				mine = append(mine, rec)
				mu.Unlock()
			case 1:
				chat(t, s, callSpec{endUser: "acct-1", run: "run-y"})
			default:
				chat(t, s, callSpec{endUser: "acct-9", run: "run-z"})
			}
		}()
	}
	wg.Wait()
	require.Len(t, mine, 2)

	// A row reusing one of our ids but carrying another run (a spoof, or a retry of
	// another attempt) and an exact duplicate of one of our rows.
	ours := rowsOf(s, "run-x")
	dup := ours[mine[0].RequestID]
	s.AddSpendRows(dup)
	spoof := dup
	spoof.Metadata = map[string]any{"spend_logs_metadata": map[string]any{"run_id": "run-y", "attempt": 0}}
	spoof.Spend = 99
	s.AddSpendRows(spoof)
	other := ours[mine[1].RequestID]
	other.Metadata = map[string]any{"spend_logs_metadata": map[string]any{"run_id": "run-x", "attempt": 1}}
	other.Spend = 77
	s.AddSpendRows(other)

	rec, err := newReconciler(t, s).Reconcile(context.Background(), request("run-x", 0, mine...))
	require.NoError(t, err)
	require.Len(t, rec.Facts, 2)
	assert.Equal(t, 2, rec.Total.Calls, "the duplicate row counts once")
	assert.InDelta(t, ours[mine[0].RequestID].Spend+ours[mine[1].RequestID].Spend, rec.Total.Spend, 1e-12,
		"rows of run-y, of attempt 1 and of other users are never counted")
}

func TestReconcileTransientFailures(t *testing.T) {
	s := newFake(t)
	calls := []port.AuditRecord{chat(t, s, callSpec{endUser: "acct-1", run: "run-t"})}

	s.FailNext("/spend/logs/v2", 1, http.StatusBadGateway, litellmtest.ShapeDetailString)
	s.FailNext("/spend/logs/v2", 1, http.StatusServiceUnavailable, litellmtest.ShapeProxy)
	rec, err := newReconciler(t, s).Reconcile(context.Background(), request("run-t", 0, calls...))
	require.NoError(t, err, "502 and 503 are retried")
	assert.Len(t, rec.Facts, 1)

	s.ResetRequests()
	s.MalformNext("/spend/logs/v2", 1)
	rec, err = newReconciler(t, s).Reconcile(context.Background(), request("run-t", 0, calls...))
	require.NoError(t, err, "a malformed page is polled again")
	assert.Len(t, rec.Facts, 1)
	assert.Equal(t, 2, s.RequestCount("/spend/logs/v2"))

	s.MalformNext("/spend/logs/v2", 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	rec, err = newReconciler(t, s).Reconcile(ctx, request("run-t", 0, calls...))
	require.ErrorIs(t, err, port.ErrUnattributed)
	assert.ErrorIs(t, err, litellm.ErrMalformed, "the last poll's failure is reported")
	assert.Equal(t, []string{calls[0].CallID}, rec.Missing)
}

func TestReconcileUnauthorized(t *testing.T) {
	for _, shape := range []litellmtest.ErrorShape{litellmtest.ShapeProxy, litellmtest.ShapeDetail} {
		for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden} {
			t.Run(fmt.Sprint(status, shape), func(t *testing.T) {
				s := newFake(t)
				calls := []port.AuditRecord{chat(t, s, callSpec{endUser: "acct-1", run: "run-u"})}
				s.FailNext("/spend/logs/v2", 100, status, shape)
				rec, err := newReconciler(t, s).Reconcile(context.Background(), request("run-u", 0, calls...))
				require.ErrorIs(t, err, litellm.ErrUnauthorized)
				var op *port.OpError
				require.ErrorAs(t, err, &op)
				assert.Equal(t, "run-u", op.RunID)
				assert.Empty(t, rec.Facts)
				assert.Equal(t, 1, s.RequestCount("/spend/logs/v2"), "no polling against a refused key")
			})
		}
	}
}

func TestReconcileDeadlineWithMissing(t *testing.T) {
	s := newFake(t)
	calls := []port.AuditRecord{
		chat(t, s, callSpec{endUser: "acct-1", run: "run-d"}),
		{Time: time.Now(), RunID: "run-d", CallID: "never-logged-call", RequestID: "chatcmpl-never-logged", Status: 200},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
	defer cancel()
	rec, err := newReconciler(t, s).Reconcile(ctx, request("run-d", 0, calls...))
	require.ErrorIs(t, err, port.ErrUnattributed)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, []string{"never-logged-call"}, rec.Missing)
	require.Len(t, rec.Facts, 1, "what was found is returned with the error")
	assert.Equal(t, calls[0].RequestID, rec.Facts[0].RequestID)
	assert.Equal(t, 1, rec.Total.Calls)
	assert.Greater(t, s.RequestCount("/spend/logs/v2"), 1, "it polled until the deadline")
}

func TestReconcileNoAttributableRows(t *testing.T) {
	s := newFake(t)
	// The metadata header was not JSON, so LiteLLM dropped it: the rows exist but
	// cannot be tied to the run.
	calls := []port.AuditRecord{
		chat(t, s, callSpec{endUser: "acct-1", run: "run-n", metadata: "run_id=run-n"}),
		chat(t, s, callSpec{endUser: "acct-1", run: "run-n", metadata: "{"}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	rec, err := newReconciler(t, s).Reconcile(ctx, request("run-n", 0, calls...))
	require.ErrorIs(t, err, port.ErrUnattributed)
	assert.Contains(t, err.Error(), "none of the 2 audited calls")
	assert.Zero(t, rec.Total)
	assert.Equal(t, []string{calls[0].CallID, calls[1].CallID}, rec.Missing)
}

func TestReconcileLegacyFallback(t *testing.T) {
	s := newFake(t)
	calls := []port.AuditRecord{
		chat(t, s, callSpec{endUser: "acct-1", run: "run-old"}),
		chat(t, s, callSpec{endUser: "acct-1", run: "run-old"}),
	}
	s.FailNext("/spend/logs/v2", 1000, http.StatusNotFound, litellmtest.ShapeDetailString)
	rec, err := newReconciler(t, s).Reconcile(context.Background(), request("run-old", 0, calls...))
	require.NoError(t, err)
	assert.Len(t, rec.Facts, 2)
	assert.Equal(t, 2, s.RequestCount("/spend/logs"), "one legacy lookup per call")
}

func TestReconcileValidates(t *testing.T) {
	s := newFake(t)
	r := newReconciler(t, s)
	for name, req := range map[string]port.ReconcileRequest{
		"bad run id":       {RunID: "../x"},
		"negative attempt": {RunID: "run-1", Attempt: -1},
		"inverted window":  {RunID: "run-1", Since: time.Now(), Until: time.Now().Add(-time.Hour)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := r.Reconcile(context.Background(), req)
			assert.ErrorIs(t, err, port.ErrInvalidSpec)
		})
	}
	rec, err := r.Reconcile(context.Background(), port.ReconcileRequest{RunID: "run-empty", Calls: []port.AuditRecord{{Blocked: "budget"}}})
	require.NoError(t, err, "a run without billable calls owes nothing")
	assert.Zero(t, rec.Total)
	assert.Zero(t, s.RequestCount("/spend/logs/v2"))

	_, err = litellmspend.NewReconciler(nil)
	assert.ErrorIs(t, err, port.ErrInvalidSpec)
	c, _ := litellm.New(litellm.WithBaseURL(s.URL), litellm.WithMasterKey("k"))
	_, err = litellmspend.NewReconciler(c, litellmspend.WithPollInterval(0, time.Second))
	assert.ErrorIs(t, err, port.ErrInvalidSpec)
}

// A row of the run's call under another end user is reported as misattributed, the
// same whether the server applies the end_user filter (the row is then only found
// by the unfiltered look) or returns every user's rows.
func TestReconcileMisattributed(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		t.Run(fmt.Sprintf("filter ignored %v", ignore), func(t *testing.T) {
			s := newFake(t)
			s.IgnoreEndUserFilter(ignore)
			calls := []port.AuditRecord{
				chat(t, s, callSpec{endUser: "acct-1", run: "run-m"}),
				chat(t, s, callSpec{endUser: "acct-evil", run: "run-m"}),
				chat(t, s, callSpec{endUser: "acct-1", run: "run-m", stream: true}),
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			rec, err := newReconciler(t, s).Reconcile(ctx, request("run-m", 0, calls...))
			require.ErrorIs(t, err, litellmspend.ErrMisattributed)
			assert.ErrorIs(t, err, port.ErrUnattributed, "a misattributed call is not billed to the run")
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "a call whose row exists is settled at once")
			assert.Less(t, time.Since(start), 5*time.Second)
			var me *litellmspend.MisattributedError
			require.ErrorAs(t, err, &me)
			assert.Equal(t, "acct-1", me.BillingAccountID)
			assert.Equal(t, []string{calls[1].CallID}, me.Calls)
			assert.Equal(t, []string{"acct-evil"}, me.EndUsers)
			assert.Contains(t, err.Error(), calls[1].CallID)
			assert.NotContains(t, err.Error(), "have no billing row", "no call is missing outright")

			assert.Equal(t, []string{calls[1].CallID}, rec.Missing)
			require.Len(t, rec.Facts, 2)
			assert.Equal(t, calls[0].RequestID, rec.Facts[0].RequestID)
			assert.Equal(t, calls[2].RequestID, rec.Facts[1].RequestID)
			rows := rowsOf(s, "run-m")
			assert.InDelta(t, rows[calls[0].RequestID].Spend+rows[calls[2].RequestID].Spend, rec.Total.Spend, 1e-12,
				"the other end user's row is never counted")

			unfiltered := 0
			for _, r := range s.Requests() {
				if r.Path == "/spend/logs/v2" && r.Query().Get("end_user") == "" {
					unfiltered++
				}
			}
			if ignore {
				assert.Zero(t, unfiltered, "the filtered walk already returned every user's rows")
			} else {
				assert.Equal(t, 1, unfiltered, "one look without the filter finds the misattributed row")
			}
		})
	}
}

// A busy proxy writes exactly a page of newer rows before every page request, so
// offset paging would see page 2 repeat page 1 forever and never reach the run's
// older rows. The calls are still billed.
func TestReconcileWhileAPageOfNewerRowsArrivesBeforeEachPage(t *testing.T) {
	s := newFake(t)
	calls := []port.AuditRecord{
		chat(t, s, callSpec{endUser: "acct-1", run: "run-p"}),
		chat(t, s, callSpec{endUser: "acct-1", run: "run-p"}),
	}
	const size = 5
	// Other calls of the same end user since the run's, a second apart, so the
	// filter keeps them; then a page of newer rows before every page request.
	now := time.Now()
	s.Synthesize(12, now.Add(time.Second), time.Second, "acct-1")
	var mu sync.Mutex
	n := 0
	s.BeforeSpendLogsPage(func(url.Values) {
		mu.Lock()
		defer mu.Unlock()
		n++
		rows := make([]litellmtest.SpendRow, size)
		for i := range rows {
			at := now.Add(time.Duration(20+n)*time.Second + time.Millisecond + time.Duration(i)*time.Microsecond)
			rows[i] = litellmtest.SpendRow{RequestID: fmt.Sprintf("chatcmpl-busy-%03d-%d", n, i), StartTime: at, EndTime: at,
				EndUser: "acct-1", Model: "gpt-4o-mini", Status: "success", Spend: 1}
		}
		s.AddSpendRows(rows...)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := newReconciler(t, s, litellmspend.WithPageSize(size)).Reconcile(ctx, request("run-p", 0, calls...))
	require.NoError(t, err)
	require.Len(t, rec.Facts, 2)
	assert.Empty(t, rec.Missing)
	assert.Equal(t, calls[0].RequestID, rec.Facts[0].RequestID)
	assert.Equal(t, calls[1].RequestID, rec.Facts[1].RequestID)
	assert.LessOrEqual(t, s.RequestCount("/spend/logs/v2"), 10, "one walk: the run's rows sit behind four pages")
}

// The legacy lookup by request id sees every end user's row: a misattributed call is
// reported the same way there.
func TestReconcileMisattributedLegacy(t *testing.T) {
	s := newFake(t)
	calls := []port.AuditRecord{
		chat(t, s, callSpec{endUser: "acct-1", run: "run-lm"}),
		chat(t, s, callSpec{endUser: "acct-other", run: "run-lm"}),
	}
	s.FailNext("/spend/logs/v2", 1000, http.StatusNotFound, litellmtest.ShapeDetailString)
	rec, err := newReconciler(t, s).Reconcile(context.Background(), request("run-lm", 0, calls...))
	var me *litellmspend.MisattributedError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, []string{calls[1].CallID}, me.Calls)
	assert.Equal(t, []string{"acct-other"}, me.EndUsers)
	require.Len(t, rec.Facts, 1)
	assert.Equal(t, calls[0].RequestID, rec.Facts[0].RequestID)
	assert.Equal(t, []string{calls[1].CallID}, rec.Missing)
}
