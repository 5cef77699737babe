package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// budgetCallTokens is what the fake upstream bills each call (prompt + completion).
const budgetCallTokens = 100

// budgetChat asks for at most 50 completion tokens: the call's reservation covers
// what the upstream bills for it.
const budgetChat = `{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`

// TestProxydTokenBudgetAcrossCrashes: a run with a token budget calls from 8
// workers as fast as it can while the daemon is SIGKILLed 0, 1 and 3 times (and
// restarted at once), until the budget refuses. Kills add nothing to what the
// upstream bills past the budget (every call's reservation is journaled before it is
// forwarded, and a call a kill cut is charged it at the restart: a kill costs the run
// its cut calls' reservations rather than letting it overspend by them); and every
// call the upstream saw has an audit record, a whole one or one saying the daemon
// stopped during it. About 20 s.
func TestProxydTokenBudgetAcrossCrashes(t *testing.T) {
	const budget = 20000
	overshoot := map[int]float64{}
	for _, kills := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("kills-%d", kills), func(t *testing.T) {
			o, unrecorded := budgetAcrossCrashes(t, budget, kills)
			overshoot[kills] = o
			t.Logf("%d kills: overshoot %.1f%% of the budget, %d upstream calls without an audit record", kills, 100*o, unrecorded)
			if unrecorded > 0 {
				t.Errorf("%d calls the upstream saw have no audit record", unrecorded)
			}
		})
	}
	// Kills add nothing to the overshoot (one call's tokens of slack for timing).
	for _, k := range []int{1, 3} {
		if bound := overshoot[0] + float64(budgetCallTokens)/budget; overshoot[k] > bound {
			t.Errorf("after %d kills the upstream billed %.1f%% past the budget (%.1f%% without a kill): the kills' calls in flight were not charged",
				k, 100*overshoot[k], 100*overshoot[0])
		}
	}
}

// budgetAcrossCrashes runs one run of budget tokens to its end with kills SIGKILLs
// of the daemon spread over it, and returns the overshoot (billed/budget - 1) and
// the number of upstream calls without an audit record.
func budgetAcrossCrashes(t *testing.T, budget, kills int) (float64, int) {
	fake, err := litellmtest.NewUnstartedServer(litellmtest.WithReply(func(litellmtest.ChatRequest) litellmtest.Reply {
		return litellmtest.Reply{Content: "a b", PromptTokens: 50, CompletionTokens: 50}
	}))
	if err != nil {
		t.Fatal(err)
	}
	// A call takes 20 ms upstream: calls are in flight whenever the daemon dies.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		fake.Handler().ServeHTTP(w, r)
	}))
	defer func() { up.Close(); fake.Close() }()
	d := startProxyd(t)
	m, err := proxyd.NewManager(d.client)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	runID := fmt.Sprintf("budget-crash-%d", kills)
	p, err := m.StartProxy(ctx, port.ProxySpec{RunID: runID, Upstream: up.URL, APIKey: fake.MasterKey(),
		Attribution: port.Attribution{BillingAccountID: "acct-budget"}, Budget: port.Budget{MaxTokens: int64(budget)}})
	if err != nil {
		t.Fatal(err)
	}
	c := runHTTP(p.Registration().SocketPath, p.Registration().Token)
	upstreamCalls := func() int {
		n := 0
		for _, rq := range fake.Requests() {
			if rq.Path == "/v1/chat/completions" && strings.Contains(rq.Header.Get("X-Litellm-Spend-Logs-Metadata"), `"run_id":"`+runID+`"`) {
				n++
			}
		}
		return n
	}

	var refused atomic.Int32
	var workers sync.WaitGroup
	for range 8 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); {
				req, _ := http.NewRequest(http.MethodPost, "http://sandbox/v1/chat/completions", strings.NewReader(budgetChat))
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					time.Sleep(10 * time.Millisecond) // the daemon is down: it comes back
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					refused.Add(1)
					return
				}
			}
		}()
	}
	// The kills, spread over the run's first half (about 200 calls of 20 ms on 8
	// workers: 0.5 s).
	for i := range kills {
		time.Sleep(time.Duration(60+40*i) * time.Millisecond)
		d.stop(syscall.SIGKILL)
		d.start()
	}
	workers.Wait()
	if refused.Load() != 8 {
		t.Fatalf("%d of 8 workers saw the budget's refusal", refused.Load())
	}
	calls := upstreamCalls()
	// A call's record is stored once its handler ends, which can be just after its
	// client read the whole answer: the records are read until they hold every call
	// or a few seconds passed.
	recorded := 0
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		page, err := d.client.Audit(ctx, p.Registration().ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		recorded = 0
		for _, rec := range page.Records {
			if rec.Blocked == "" {
				recorded++
			}
		}
		if recorded >= calls || time.Now().After(deadline) {
			break
		}
	}
	if _, err := p.Stop(ctx); err != nil {
		t.Error(err)
	}
	billed := calls * budgetCallTokens
	return float64(billed)/float64(budget) - 1, max(0, calls-recorded)
}
