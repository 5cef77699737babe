package litellmspend_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// Reconcile a run's audited call against LiteLLM's spend logs. The fake stands in
// for LiteLLM; the request below is what the per-run proxy sends upstream.
func ExampleReconciler() {
	fake := litellmtest.NewServer()
	defer fake.Close()

	req, _ := http.NewRequest("POST", fake.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`))
	req.Header.Set("Authorization", "Bearer "+fake.MasterKey())
	req.Header.Set("x-litellm-end-user-id", "acct-42")
	req.Header.Set("x-litellm-spend-logs-metadata", `{"run_id":"run-1","attempt":0}`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	audit := port.AuditRecord{Time: time.Now(), RunID: "run-1", Status: resp.StatusCode,
		CallID: resp.Header.Get("x-litellm-call-id")}

	c, err := litellm.New(litellm.WithBaseURL(fake.URL), litellm.WithMasterKey(fake.MasterKey()))
	if err != nil {
		panic(err)
	}
	r, err := litellmspend.NewReconciler(c)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := r.Reconcile(ctx, port.ReconcileRequest{RunID: "run-1", BillingAccountID: "acct-42", Calls: []port.AuditRecord{audit}})
	if err != nil {
		panic(err)
	}
	fmt.Println("calls:", rec.Total.Calls, "tokens:", rec.Total.TotalTokens, "missing:", len(rec.Missing))
	fmt.Println("key:", rec.Facts[0].IdempotencyKey == "run-1/0/"+audit.CallID)
	// Output:
	// calls: 1 tokens: 6 missing: 0
	// key: true
}
