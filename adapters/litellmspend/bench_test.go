package litellmspend_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// BenchmarkReconcile50of100k reconciles a run of 50 calls against 100,000 spend rows
// of other users in the same window, served by litellmtest. It reports the requests
// made per reconciliation: with a working end_user filter one page holds the run;
// with the filter ignored (a bug seen in real deployments) the reconciler pages
// until it has found every call and stops there.
func BenchmarkReconcile50of100k(b *testing.B) {
	for _, ignore := range []bool{false, true} {
		name := "filtered"
		if ignore {
			name = "filter-ignored"
		}
		b.Run(name, func(b *testing.B) {
			s := litellmtest.NewServer()
			defer s.Close()
			now := time.Now().UTC()
			start := now.Add(-time.Hour)
			s.Synthesize(100_000, start, 30*time.Millisecond, "acct-other-1", "acct-other-2")
			s.IgnoreEndUserFilter(ignore)

			// The run's rows sit in the middle of the window, among the others.
			calls := make([]port.AuditRecord, 50)
			rows := make([]litellmtest.SpendRow, 50)
			key := litellmtest.HashKey(s.MasterKey())
			for i := range rows {
				at := start.Add(30*time.Minute + time.Duration(i)*time.Second)
				calls[i] = port.AuditRecord{Time: at, RunID: "run-bench", CallID: fmt.Sprintf("call-%02d", i),
					RequestID: fmt.Sprintf("chatcmpl-bench-%02d", i), Latency: time.Second, Status: 200}
				rows[i] = litellmtest.SpendRow{RequestID: calls[i].RequestID, LitellmCallID: calls[i].CallID,
					APIKey: key, StartTime: at, EndTime: at.Add(time.Second), Model: "gpt-4o-mini", EndUser: "acct-bench",
					PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120, Spend: 0.0001, Status: "success",
					Metadata: map[string]any{"spend_logs_metadata": map[string]any{"run_id": "run-bench", "attempt": 0}}}
			}
			s.AddSpendRows(rows...)
			c, err := litellm.New(litellm.WithBaseURL(s.URL), litellm.WithMasterKey(s.MasterKey()))
			if err != nil {
				b.Fatal(err)
			}
			r, err := litellmspend.NewReconciler(c)
			if err != nil {
				b.Fatal(err)
			}
			req := port.ReconcileRequest{RunID: "run-bench", BillingAccountID: "acct-bench", Calls: calls,
				Since: start, Until: now}
			s.ResetRequests()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				rec, err := r.Reconcile(context.Background(), req)
				if err != nil || rec.Total.Calls != 50 {
					b.Fatalf("reconciled %d calls: %v", rec.Total.Calls, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(s.RequestCount("/spend/logs/v2"))/float64(b.N), "requests/op")
		})
	}
}
