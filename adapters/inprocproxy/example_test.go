package inprocproxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/port"
)

// A per-run proxy in front of a stand-in for LiteLLM, with a budget of one call. The
// client plays the in-sandbox bridge: plain HTTP over the run's unix socket.
func ExampleManager() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-litellm-call-id", "call-1")
		// Show which identity reached the upstream: the proxy's, not the agent's.
		fmt.Fprintf(w, `{"id":"chatcmpl-1","end_user":%q,"usage":{"total_tokens":12}}`, r.Header.Get("x-litellm-end-user-id"))
	}))
	defer upstream.Close()

	base, err := os.MkdirTemp("", "inproc-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(base)
	m, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner("example"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	p, err := m.Start(ctx, port.ProxySpec{
		RunID: "run-1", Upstream: upstream.URL, APIKey: "sk-host-only",
		Attribution: port.Attribution{BillingAccountID: "acct-1"},
		Budget:      port.Budget{MaxCalls: 1},
	})
	if err != nil {
		panic(err)
	}

	sock := filepath.Join(p.Socket().HostDir, port.LLMSocketName)
	agent := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, "http://localhost:8080/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		req.Header.Set("x-litellm-end-user-id", "someone-else") // stripped by the proxy
		resp, err := agent.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}

	records, err := p.Stop(ctx)
	if err != nil {
		panic(err)
	}
	for _, r := range records {
		fmt.Printf("%s %d model=%s call=%s request=%s blocked=%q\n", r.Path, r.Status, r.Model, r.CallID, r.RequestID, r.Blocked)
	}
	// Output:
	// 200 {"id":"chatcmpl-1","end_user":"acct-1","usage":{"total_tokens":12}}
	// 429 {"error":{"message":"LLM call budget exceeded: this run may make 1 calls and has used them all","type":"budget_exceeded","param":null,"code":"429"}}
	// /v1/chat/completions 200 model=gpt-4o-mini call=call-1 request=chatcmpl-1 blocked=""
	// /v1/chat/completions 429 model=gpt-4o-mini call= request= blocked="budget_exceeded: max_calls"
}
