package billing_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/port"
)

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:x"}]}`

type fixture struct {
	llm    *litellmtest.Server
	router *billing.Router
	srv    *httptest.Server
}

func newFixture(t *testing.T, opts ...billing.Option) *fixture {
	t.Helper()
	llm := litellmtest.NewServer()
	t.Cleanup(llm.Close)
	r, err := billing.NewRouter(llm.URL, llm.MasterKey(), opts...)
	require.NoError(t, err)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &fixture{llm: llm, router: r, srv: srv}
}

func (f *fixture) register(t *testing.T, runID, account string, budget port.Budget) *billing.Registration {
	t.Helper()
	reg, err := f.router.Register(billing.Run{RunID: runID, Attempt: 2, Budget: budget,
		Attribution: port.Attribution{BillingAccountID: account, SessionID: "s-" + runID}})
	require.NoError(t, err)
	return reg
}

// auditOf waits until the run's audit holds n records and returns them. A call is
// recorded when its handler ends, which can be just after the client has read the
// whole response; Registration.Stop is what waits for calls in flight.
func auditOf(t *testing.T, reg *billing.Registration, n int) []port.AuditRecord {
	t.Helper()
	var recs []port.AuditRecord
	require.Eventually(t, func() bool { recs = reg.Audit(); return len(recs) >= n }, 10*time.Second, time.Millisecond,
		"the audit of %s never held %d records", reg.RunID(), n)
	require.Len(t, recs, n)
	return recs
}

func post(t *testing.T, url, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestRouterAttributesByPathTokenAndOverwritesSpoofs(t *testing.T) {
	f := newFixture(t)
	a := f.register(t, "run-a", "acct-a", port.Budget{})
	b := f.register(t, "run-b", "acct-b", port.Budget{})

	status, body := post(t, a.BaseURL(f.srv.URL)+"/chat/completions", chatBody, map[string]string{
		"Authorization":                 "Bearer sk-agent-own",
		"X-Api-Key":                     "sk-agent-other",
		"X-Litellm-End-User-Id":         "acct-b",
		"X-Litellm-Spend-Logs-Metadata": `{"run_id":"run-b"}`,
		"X-Litellm-Customer-Id":         "acct-b",
	})
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "ECHO:x")

	reqs := f.llm.Requests()
	require.Len(t, reqs, 1)
	h := reqs[0].Header
	assert.Equal(t, "/v1/chat/completions", reqs[0].Path)
	assert.Equal(t, "Bearer "+f.llm.MasterKey(), h.Get("Authorization"))
	assert.Equal(t, "acct-a", h.Get("X-Litellm-End-User-Id"))
	assert.Empty(t, h.Get("X-Litellm-Customer-Id"))
	assert.Empty(t, h.Get("X-Api-Key"))
	var md map[string]any
	require.NoError(t, json.Unmarshal([]byte(h.Get("X-Litellm-Spend-Logs-Metadata")), &md))
	assert.Equal(t, map[string]any{"run_id": "run-a", "attempt": float64(2), "session_id": "s-run-a"}, md)

	rows := f.llm.SpendRows()
	require.Len(t, rows, 1)
	assert.Equal(t, "acct-a", rows[0].EndUser)

	recs := auditOf(t, a, 1)
	assert.Equal(t, "run-a", recs[0].RunID)
	assert.Equal(t, 2, recs[0].Attempt)
	assert.Equal(t, "/v1/chat/completions", recs[0].Path)
	assert.Equal(t, http.StatusOK, recs[0].Status)
	assert.Equal(t, "gpt-4o-mini", recs[0].Model)
	assert.Equal(t, rows[0].LitellmCallID, recs[0].CallID)
	assert.Equal(t, rows[0].RequestID, recs[0].RequestID)
	assert.Equal(t, int64(len(chatBody)), recs[0].ReqBytes)
	assert.Empty(t, b.Audit(), "nothing was billed to run b")
}

func TestRouterRefusesUnattributedCalls(t *testing.T) {
	f := newFixture(t)
	a := f.register(t, "run-a", "acct-a", port.Budget{})

	for name, tc := range map[string]struct {
		url string
		hdr map[string]string
	}{
		"no token":         {url: f.srv.URL + "/v1/chat/completions"},
		"unknown token":    {url: f.srv.URL + "/r/not-a-token/v1/chat/completions"},
		"header vs path":   {url: a.BaseURL(f.srv.URL) + "/chat/completions", hdr: map[string]string{billing.TokenHeader: "other"}},
		"token, no path":   {url: f.srv.URL + "/r/" + a.Token()},
		"bad header token": {url: f.srv.URL + "/v1/chat/completions", hdr: map[string]string{billing.TokenHeader: "nope"}},
	} {
		status, body := post(t, tc.url, chatBody, tc.hdr)
		assert.Equal(t, http.StatusForbidden, status, name)
		assert.Contains(t, body, `"type":"unattributed"`, name)
	}
	assert.Empty(t, f.llm.Requests(), "no unattributed call reached LiteLLM")
	assert.Empty(t, a.Audit())
	st := f.router.Stats()
	assert.Equal(t, billing.Stats{Registered: 1, Unattributed: 5}, st)
	recs := f.router.Unattributed()
	require.Len(t, recs, 5)
	for _, rec := range recs {
		assert.Equal(t, "unattributed", rec.Blocked)
		assert.Empty(t, rec.RunID)
		assert.NotContains(t, rec.Path, a.Token(), "a token never lands in a record")
	}
}

func TestRouterHeaderTokenForForkGateways(t *testing.T) {
	f := newFixture(t)
	b := f.register(t, "run-b", "acct-b", port.Budget{})
	status, body := post(t, f.srv.URL+"/v1/chat/completions", chatBody, map[string]string{billing.TokenHeader: b.Token()})
	require.Equal(t, http.StatusOK, status, body)
	reqs := f.llm.Requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, "acct-b", reqs[0].Header.Get("X-Litellm-End-User-Id"))
	assert.Empty(t, reqs[0].Header.Get(billing.TokenHeader), "the token is not forwarded")
	auditOf(t, b, 1)
}

func TestRouterStopRevokesToken(t *testing.T) {
	f := newFixture(t)
	a := f.register(t, "run-a", "acct-a", port.Budget{})
	status, _ := post(t, a.BaseURL(f.srv.URL)+"/chat/completions", chatBody, nil)
	require.Equal(t, http.StatusOK, status)
	recs, err := a.Stop(context.Background())
	require.NoError(t, err)
	require.Len(t, recs, 1)
	again, err := a.Stop(context.Background())
	require.NoError(t, err)
	assert.Equal(t, recs, again)

	status, _ = post(t, a.BaseURL(f.srv.URL)+"/chat/completions", chatBody, nil)
	assert.Equal(t, http.StatusForbidden, status)
	assert.Len(t, f.llm.Requests(), 1)
	assert.Equal(t, billing.Stats{Unattributed: 1}, f.router.Stats())

	// The same run and attempt may register again once stopped, with a new token.
	a2 := f.register(t, "run-a", "acct-a", port.Budget{})
	assert.NotEqual(t, a.Token(), a2.Token())
}

func TestRouterStopWaitsForCallsInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","usage":{"total_tokens":3}}`)
	}))
	defer up.Close()
	r, err := billing.NewRouter(up.URL, "sk-key")
	require.NoError(t, err)
	srv := httptest.NewServer(r)
	defer srv.Close()
	reg, err := r.Register(billing.Run{RunID: "run-a", Attribution: port.Attribution{BillingAccountID: "acct"}})
	require.NoError(t, err)

	done := make(chan int)
	go func() {
		resp, err := http.Post(reg.BaseURL(srv.URL)+"/chat/completions", "application/json", strings.NewReader(chatBody))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	recs, err := reg.Stop(cancelled)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, recs, "the call in flight is not finished yet")
	close(release)
	recs, err = reg.Stop(context.Background())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, <-done)
	require.Len(t, recs, 1)
	assert.Equal(t, "chatcmpl-1", recs[0].RequestID)
}

func TestRouterBudgets(t *testing.T) {
	f := newFixture(t)
	calls := f.register(t, "run-calls", "acct", port.Budget{MaxCalls: 1})
	status, _ := post(t, calls.BaseURL(f.srv.URL)+"/chat/completions", chatBody, nil)
	require.Equal(t, http.StatusOK, status)
	status, body := post(t, calls.BaseURL(f.srv.URL)+"/chat/completions", chatBody, nil)
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Contains(t, body, "budget exceeded")

	// Streamed usage is charged to the token budget as it arrives.
	tokens := f.register(t, "run-tokens", "acct", port.Budget{MaxTokens: 1})
	streamed := `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	status, body = post(t, tokens.BaseURL(f.srv.URL)+"/chat/completions", streamed, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "data: [DONE]")
	status, _ = post(t, tokens.BaseURL(f.srv.URL)+"/chat/completions", streamed, nil)
	assert.Equal(t, http.StatusTooManyRequests, status)

	assert.Len(t, f.llm.Requests(), 2, "refused calls never reach LiteLLM")
	recs := auditOf(t, tokens, 2)
	assert.True(t, recs[0].Streamed)
	assert.True(t, strings.HasPrefix(recs[0].RequestID, "chatcmpl-"), recs[0].RequestID)
	assert.Equal(t, "budget_exceeded: max_tokens", recs[1].Blocked)
	assert.Equal(t, "budget_exceeded: max_calls", auditOf(t, calls, 2)[1].Blocked)
}

func TestRouterFallbackBillsAndFlags(t *testing.T) {
	f := newFixture(t, billing.WithFallback(billing.Run{RunID: "unattributed", Attribution: port.Attribution{BillingAccountID: "acct-house"}}))
	status, body := post(t, f.srv.URL+"/v1/chat/completions", chatBody, nil)
	require.Equal(t, http.StatusOK, status, body)
	reqs := f.llm.Requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, "acct-house", reqs[0].Header.Get("X-Litellm-End-User-Id"))
	assert.Equal(t, billing.Stats{Fallback: 1}, f.router.Stats())
	recs := auditOf(t, f.router.Fallback(), 1)
	assert.Equal(t, "unattributed", recs[0].RunID)
}

func TestRouterRegisterErrors(t *testing.T) {
	f := newFixture(t)
	f.register(t, "run-a", "acct-a", port.Budget{})
	for name, run := range map[string]billing.Run{
		"duplicate":       {RunID: "run-a", Attempt: 2, Attribution: port.Attribution{BillingAccountID: "x"}},
		"bad run id":      {RunID: "../a", Attribution: port.Attribution{BillingAccountID: "x"}},
		"no account":      {RunID: "run-x"},
		"header injected": {RunID: "run-y", Attribution: port.Attribution{BillingAccountID: "x\r\nX-Evil: 1"}},
		"negative budget": {RunID: "run-z", Attribution: port.Attribution{BillingAccountID: "x"}, Budget: port.Budget{MaxCalls: -1}},
	} {
		_, err := f.router.Register(run)
		assert.ErrorIs(t, err, port.ErrInvalidSpec, name)
		var oe *port.OpError
		assert.True(t, errors.As(err, &oe), name)
	}
	require.NoError(t, f.router.Shutdown(context.Background()))
	_, err := f.router.Register(billing.Run{RunID: "late", Attribution: port.Attribution{BillingAccountID: "x"}})
	assert.ErrorIs(t, err, port.ErrClosed)
}

func TestNewRouterValidates(t *testing.T) {
	for name, tc := range map[string]struct {
		up, key string
		opts    []billing.Option
	}{
		"no scheme":      {up: "127.0.0.1:4000", key: "sk"},
		"credentials":    {up: "http://u:p@127.0.0.1:4000", key: "sk"},
		"empty key":      {up: "http://127.0.0.1:4000"},
		"key with space": {up: "http://127.0.0.1:4000", key: "sk x"},
		"nil logger":     {up: "http://127.0.0.1:4000", key: "sk", opts: []billing.Option{billing.WithLogger(nil)}},
		"bad fallback":   {up: "http://127.0.0.1:4000", key: "sk", opts: []billing.Option{billing.WithFallback(billing.Run{RunID: "fb"})}},
		"zero max body":  {up: "http://127.0.0.1:4000", key: "sk", opts: []billing.Option{billing.WithMaxRequestBytes(0)}},
	} {
		_, err := billing.NewRouter(tc.up, tc.key, tc.opts...)
		assert.ErrorIs(t, err, port.ErrInvalidSpec, name)
	}
}

func TestRouterHealth(t *testing.T) {
	f := newFixture(t)
	resp, err := http.Get(f.srv.URL + "/health")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"status":"ok"}`, string(b))
	assert.Zero(t, f.router.Stats().Unattributed)
}
