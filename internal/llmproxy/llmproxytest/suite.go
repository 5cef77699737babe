// Package llmproxytest is the conformance suite of the proxy engine
// (internal/llmproxy): every front that hands calls to an Engine runs it with a
// constructor for itself, so the budget, audit, routing and policy rules are
// proven once for all of them, against the fake LiteLLM (litellm/litellmtest),
// asserting on what reached the upstream.
package llmproxytest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// Config is what a front under test is built with.
type Config struct {
	// Upstream is the fake LiteLLM's base URL; APIKey its master key.
	Upstream, APIKey string
}

// RunSpec is one run the suite starts on a front.
type RunSpec struct {
	RunID       string
	Attempt     int
	Attribution port.Attribution
	Budget      port.Budget
}

// Run is one run served by the front under test.
type Run struct {
	// Client reaches the run; BaseURL is prefixed to every request path (for
	// example "http://sandbox" for a per-run socket, or a router's /r/<token>).
	Client  *http.Client
	BaseURL string
	// Audit returns the run's records so far; Stop ends the run and returns them.
	Audit func() []port.AuditRecord
	Stop  func(context.Context) ([]port.AuditRecord, error)
}

// Front starts runs on one front under test.
type Front interface {
	StartRun(t testing.TB, spec RunSpec) Run
}

// NewFront builds a front under test; it registers its own cleanup with t.
type NewFront func(t testing.TB, cfg Config) Front

// Test runs the whole suite against the fronts newFront builds.
func Test(t *testing.T, newFront NewFront) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, NewFront)
	}{
		{"ForwardsWithPolicyAndAudits", testForwards},
		{"StreamsAndChargesUsage", testStream},
		{"BudgetMaxCalls", testMaxCalls},
		{"BudgetMaxCallsUnderConcurrency", testMaxCallsConcurrent},
		{"BudgetMaxTokens", testMaxTokens},
		{"RefusesPathsOutsideV1", testPaths},
		{"RefusedRecordsAreCapped", testRefusedCap},
		{"StopWaitsForCallsInFlight", testStopWaits},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newFront) })
	}
}

// env is one fake upstream, one front and one run.
type env struct {
	up  *litellmtest.Server
	run Run
}

const (
	chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:m1 hello"}]}`
	account  = "acct-suite"
)

func spec(runID string) RunSpec {
	return RunSpec{RunID: runID, Attempt: 1, Attribution: port.Attribution{BillingAccountID: account, UserID: "user-7", SessionID: "sess-1"}}
}

func newEnv(t testing.TB, newFront NewFront, s RunSpec, opts ...litellmtest.Option) *env {
	t.Helper()
	up := litellmtest.NewServer(opts...)
	t.Cleanup(up.Close)
	f := newFront(t, Config{Upstream: up.URL, APIKey: up.MasterKey()})
	return &env{up: up, run: f.StartRun(t, s)}
}

// Response is an answer as the agent saw it.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// APIError decodes the OpenAI/LiteLLM error shape of the body.
func (r Response) APIError() (typ, code, msg string) {
	var e struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	_ = json.Unmarshal([]byte(r.Body), &e)
	return e.Error.Type, e.Error.Code, e.Error.Message
}

// Do sends one request to the run; rawPath goes on the wire as written.
func Do(t testing.TB, run Run, method, rawPath, body string, hdr http.Header) Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, run.BaseURL+"/", rd)
	if err != nil {
		t.Fatal(err)
	}
	// Send the path verbatim: NewRequest would re-escape some forms.
	req.URL.Opaque = strings.TrimSuffix(pathOf(run.BaseURL), "/") + rawPath
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := run.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawPath, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, rawPath, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

func pathOf(base string) string {
	rest := base[strings.Index(base, "://")+3:]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[i:]
	}
	return ""
}

// AuditN waits (bounded) until the run has n records: a call is recorded when
// its handler ends, which may be just after the client read the last byte.
func AuditN(t testing.TB, run Run, n int) []port.AuditRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs := run.Audit()
		if len(recs) >= n || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(time.Millisecond)
	}
}

func testForwards(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-fwd"))
	spoof := http.Header{
		"Authorization":                 {"Bearer sk-agent-own"},
		"X-Litellm-End-User-Id":         {"someone-else"},
		"X-Litellm-Spend-Logs-Metadata": {`{"run_id":"other"}`},
		"X-Api-Key":                     {"sk-agent-own"},
	}
	resp := Do(t, e.run, http.MethodPost, "/v1/chat/completions", chatBody, spoof)
	if resp.Status != http.StatusOK || !strings.Contains(resp.Body, "ECHO:m1") {
		t.Fatalf("call: %d %s", resp.Status, resp.Body)
	}
	reqs := e.up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(reqs))
	}
	h := reqs[0].Header
	if got := h.Get("Authorization"); got != "Bearer "+e.up.MasterKey() {
		t.Errorf("upstream Authorization = %q, want the proxy's key", got)
	}
	if got := h.Get("X-Litellm-End-User-Id"); got != account {
		t.Errorf("upstream end user = %q, want %q", got, account)
	}
	var md map[string]any
	if err := json.Unmarshal([]byte(h.Get("X-Litellm-Spend-Logs-Metadata")), &md); err != nil || md["run_id"] != "run-fwd" {
		t.Errorf("upstream spend logs metadata = %q (%v)", h.Get("X-Litellm-Spend-Logs-Metadata"), err)
	}
	if h.Get("X-Api-Key") != "" {
		t.Errorf("the agent's X-Api-Key reached the upstream")
	}
	recs := AuditN(t, e.run, 1)
	if len(recs) != 1 {
		t.Fatalf("records = %d, want 1", len(recs))
	}
	r := recs[0]
	if r.RunID != "run-fwd" || r.Attempt != 1 || r.Status != 200 || r.Model != "gpt-4o-mini" || r.Path != "/v1/chat/completions" ||
		r.CallID == "" || !strings.HasPrefix(r.RequestID, "chatcmpl-") || r.Blocked != "" || r.Error != "" || r.ReqBytes != int64(len(chatBody)) {
		t.Errorf("record = %+v", r)
	}
}

func testStream(t *testing.T, nf NewFront) {
	s := spec("run-sse")
	s.Budget.MaxTokens = 1 // the first call's usage exhausts it
	e := newEnv(t, nf, s)
	body := `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"MARKER:s1"}]}`
	resp := Do(t, e.run, http.MethodPost, "/v1/chat/completions", body, nil)
	if resp.Status != 200 || !strings.Contains(resp.Body, "data: [DONE]") {
		t.Fatalf("stream: %d %s", resp.Status, resp.Body)
	}
	recs := AuditN(t, e.run, 1)
	if len(recs) != 1 || !recs[0].Streamed || !strings.HasPrefix(recs[0].RequestID, "chatcmpl-") || recs[0].Error != "" {
		t.Fatalf("records = %+v", recs)
	}
	resp = Do(t, e.run, http.MethodPost, "/v1/chat/completions", body, nil)
	if typ, _, msg := resp.APIError(); resp.Status != 429 || typ != "budget_exceeded" || !strings.Contains(msg, "LLM token budget exceeded") {
		t.Errorf("after the stream's usage: %d %s", resp.Status, resp.Body)
	}
}

func testMaxCalls(t *testing.T, nf NewFront) {
	s := spec("run-calls")
	s.Budget.MaxCalls = 2
	e := newEnv(t, nf, s)
	for i := range 2 {
		if r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", chatBody, nil); r.Status != 200 {
			t.Fatalf("call %d: %d %s", i+1, r.Status, r.Body)
		}
	}
	r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", chatBody, nil)
	typ, code, msg := r.APIError()
	if r.Status != 429 || typ != "budget_exceeded" || code != "429" || msg != "LLM call budget exceeded: this run may make 2 calls and has used them all" {
		t.Errorf("over budget: %d %s", r.Status, r.Body)
	}
	if n := e.up.RequestCount("/v1/chat/completions"); n != 2 {
		t.Errorf("upstream saw %d calls, want 2", n)
	}
	recs := AuditN(t, e.run, 3)
	if len(recs) != 3 || recs[2].Blocked != "budget_exceeded: max_calls" || recs[2].Status != 429 {
		t.Errorf("records = %+v", recs)
	}
}

func testMaxCallsConcurrent(t *testing.T, nf NewFront) {
	s := spec("run-calls-conc")
	s.Budget.MaxCalls = 5
	e := newEnv(t, nf, s)
	var wg sync.WaitGroup
	var mu sync.Mutex
	count := map[int]int{}
	for range 20 {
		wg.Go(func() {
			r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", chatBody, nil)
			mu.Lock()
			count[r.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if count[200] != 5 || count[429] != 15 {
		t.Errorf("statuses = %v, want 5×200 and 15×429", count)
	}
	if n := e.up.RequestCount("/v1/chat/completions"); n != 5 {
		t.Errorf("upstream saw %d calls, want 5", n)
	}
}

func testMaxTokens(t *testing.T, nf NewFront) {
	s := spec("run-tokens")
	s.Budget.MaxTokens = 15 // each call uses 9 (the fake counts 7 prompt, 2 completion)
	e := newEnv(t, nf, s)
	for i := range 2 {
		if r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", chatBody, nil); r.Status != 200 {
			t.Fatalf("call %d: %d %s", i+1, r.Status, r.Body)
		}
	}
	r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", chatBody, nil)
	if _, _, msg := r.APIError(); r.Status != 429 || !strings.HasPrefix(msg, "LLM token budget exceeded: this run may use 15 tokens and has used 18") {
		t.Errorf("over budget: %d %s", r.Status, r.Body)
	}
	if n := e.up.RequestCount("/v1/chat/completions"); n != 2 {
		t.Errorf("upstream saw %d calls, want 2", n)
	}
	if recs := AuditN(t, e.run, 3); len(recs) != 3 || recs[2].Blocked != "budget_exceeded: max_tokens" {
		t.Errorf("records = %+v", recs)
	}
}

func testPaths(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-paths"))
	for _, p := range []string{"/spend/logs", "/key/list", "/v1", "/v1/", "/v1/../key/list", "/v1/./models", "/v1//models", "/v1%2Fmodels", "/%76%31/models", "/v1/chat%2fcompletions"} {
		r := Do(t, e.run, http.MethodGet, p, "", nil)
		if typ, code, _ := r.APIError(); r.Status != 404 || typ != "not_found" || code != "404" {
			t.Errorf("%s: %d %s", p, r.Status, r.Body)
		}
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Errorf("upstream saw %d requests, want none", n)
	}
	for _, rec := range AuditN(t, e.run, 10) {
		if rec.Blocked != "path_not_allowed" {
			t.Errorf("record %+v", rec)
		}
	}
}

func testRefusedCap(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-refused-cap"))
	n := llmproxy.MaxRefusedRecords + 50
	for range n {
		Do(t, e.run, http.MethodGet, "/nope", "", nil)
	}
	time.Sleep(50 * time.Millisecond) // the last handlers record after the client read
	if got := len(e.run.Audit()); got != llmproxy.MaxRefusedRecords {
		t.Errorf("records = %d, want the cap %d", got, llmproxy.MaxRefusedRecords)
	}
	if r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", chatBody, nil); r.Status != 200 {
		t.Fatalf("forwarded call: %d", r.Status)
	}
	if recs := AuditN(t, e.run, llmproxy.MaxRefusedRecords+1); len(recs) != llmproxy.MaxRefusedRecords+1 || recs[len(recs)-1].Status != 200 {
		t.Errorf("a forwarded call past the refusal cap must be kept")
	}
}

func testStopWaits(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-stop"), litellmtest.WithChunkDelay(20*time.Millisecond))
	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"MARKER:aaaa b c d e f g"}]}`
	done := make(chan Response, 1)
	go func() { done <- Do(t, e.run, http.MethodPost, "/v1/chat/completions", body, nil) }()
	deadline := time.Now().Add(5 * time.Second)
	for e.up.RequestCount("/v1/chat/completions") == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := e.run.Stop(ctx)
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if r := <-done; r.Status != 200 || !strings.Contains(r.Body, "[DONE]") {
		t.Errorf("the call in flight was cut: %d %s", r.Status, r.Body)
	}
	if len(recs) != 1 || recs[0].Status != 200 || recs[0].Error != "" {
		t.Errorf("Stop returned %+v, want the finished call", recs)
	}
}
