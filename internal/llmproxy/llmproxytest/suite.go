// Package llmproxytest is the conformance suite of the proxy engine
// (internal/llmproxy): every front that hands calls to an Engine runs it with a
// constructor for itself, so the budget, audit, routing and policy rules are
// proven once for all of them, against the fake LiteLLM (litellm/litellmtest),
// asserting on what reached the upstream.
package llmproxytest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
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
		{"HeaderAllowlist", testHeaders},
		{"ResponseHeaderAllowlist", testResponseHeaders},
		{"AuditFieldsAreInert", testAuditInert},
		{"TrailersAreDropped", testTrailers},
		{"BodyAllowlist", testBodyPolicy},
		{"NonJSONBodiesAreRefused", testNonJSON},
		{"StreamsAndChargesUsage", testStream},
		{"BudgetMaxCalls", testMaxCalls},
		{"BudgetMaxCallsUnderConcurrency", testMaxCallsConcurrent},
		{"BudgetMaxTokens", testMaxTokens},
		{"BudgetMaxTokensUnderConcurrency", testMaxTokensConcurrent},
		{"BudgetMaxTokensWorstCaseUnderConcurrency", testMaxTokensWorstCase},
		{"BudgetMaxTokensWithTools", testMaxTokensWithTools},
		{"BudgetRefusesServerTools", testServerToolsRefused},
		{"EveryAllowlistedRouteEndToEnd", testRoutes},
		{"AdminRoutesAreRefused", testAdminRoutes},
		{"NonCanonicalPathsAreRefused", testNonCanonical},
		{"RefusedRecordsAreCapped", testRefusedCap},
		{"UnbilledRecordsAreCapped", testUnbilledCap},
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

// SpoofedHeaders are client headers LiteLLM reads as credentials, attribution,
// session or trace ids, or passes on to the provider.
var SpoofedHeaders = []string{
	"X_litellm_end_user_id", "X-LiteLLM-Customer-Id", "Openai-Organization", "Openai-Project",
	"Anthropic-Api-Key", "X-Pass-Authorization", "X-Pass-Anything", "X-Litellm-Session-Id",
	"X-Agent-Session-Id", "X-Mcp-Session-Id", "Api-Key", "X-Goog-Api-Key", "Cookie", "X-Real-Ip",
	"Proxy-Authorization", "X-Agentsandbox-Run-Token-2",
}

func testHeaders(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-headers"))
	h := http.Header{"Anthropic-Version": {"2023-06-01"}, "User-Agent": {"agent/1"}}
	for _, n := range SpoofedHeaders {
		h[n] = []string{"spoof"}
	}
	if r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", chatBody, h); r.Status != 200 {
		t.Fatalf("call: %d %s", r.Status, r.Body)
	}
	got := e.up.Requests()[0].Header
	allowed := map[string]bool{"Authorization": true, "X-Litellm-End-User-Id": true, "X-Litellm-Spend-Logs-Metadata": true,
		"Content-Length": true, "Content-Type": true, "User-Agent": true, "Anthropic-Version": true}
	for name, v := range got {
		if !allowed[name] {
			t.Errorf("upstream received %s: %q", name, v)
		}
	}
	if got.Get("Anthropic-Version") != "2023-06-01" || got.Get("User-Agent") != "agent/1" {
		t.Errorf("allowlisted headers were lost: %v", got)
	}
}

// transportHeaders are response headers a front's HTTP server writes itself.
var transportHeaders = map[string]bool{"Date": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true}

// testResponseHeaders: the agent sees only the response headers of the one
// allowlist (proxypolicy.ResponseHeaders), on plain and streamed answers, errors
// and refusals: none of the shared key's rate limits, the provider's headers or
// the key's spend that LiteLLM sends (litellmtest.SharedKeyHeaders).
func testResponseHeaders(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-resp-headers"))
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/v1/chat/completions", chatBody, 200},
		{"/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"MARKER:s hi"}]}`, 200},
		{"/v1/embeddings", `{"model":"gpt-4o-mini","input":"hi"}`, 200},
		{"/v1/chat/completions", `{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}`, 0},
		{"/v1/models", "", 200},
	} {
		method := http.MethodPost
		if c.body == "" {
			method = http.MethodGet
		}
		r := Do(t, e.run, method, c.path, c.body, nil)
		if c.status != 0 && r.Status != c.status {
			t.Errorf("%s %s: %d %s", method, c.path, r.Status, r.Body)
		}
		for name, vals := range r.Header {
			if !proxypolicy.IsResponseHeaderAllowed(name) && !transportHeaders[name] {
				t.Errorf("%s %s (%d): the agent got %s: %q", method, c.path, r.Status, name, vals)
			}
			if strings.Contains(strings.Join(vals, ","), litellmtest.SharedKeyCanary) {
				t.Errorf("%s %s: the shared key's header %s reached the agent", method, c.path, name)
			}
		}
	}
	if r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", chatBody, nil); r.Header.Get("X-Litellm-Call-Id") == "" || r.Header.Get("Content-Type") == "" {
		t.Errorf("allowlisted headers were lost: %v", r.Header)
	}
}

// testAuditInert: control bytes an agent writes percent-encoded in a refused path,
// or escaped in a model name, are stored encoded: the audit an operator reads holds
// no escape sequence, CR/LF or tab (found decoded, they cleared screens and forged
// rows of sandboxctl's table).
func testAuditInert(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-audit-inert"))
	Do(t, e.run, http.MethodGet, "/v1/%1b%5d0;owned%07%0d%0afake%09row", "", nil)
	Do(t, e.run, http.MethodPost, "/v1/chat/completions", `{"model":"gpt\u001b[2J\r\nfake\trow","messages":[{"role":"user","content":"x"}]}`, nil)
	recs := AuditN(t, e.run, 2)
	if len(recs) < 2 {
		t.Fatalf("audit: %+v", recs)
	}
	for _, r := range recs {
		for _, f := range []string{r.Path, r.Model} {
			if strings.IndexFunc(f, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0 {
				t.Errorf("an audit record holds a control byte: path %q model %q", r.Path, r.Model)
			}
		}
	}
	if !strings.Contains(recs[0].Path, "%1B") {
		t.Errorf("the refused path is not stored as sent: %q", recs[0].Path)
	}
}

// SpoofedTrailers are request trailers an adversarial review sent after a
// chunked body; LiteLLM would read them as headers.
var SpoofedTrailers = http.Header{
	"Api-Key": {"sk-attacker"}, "Openai-Organization": {"org-victim"}, "X-Litellm-Tags": {"victim-tag"},
	"X-Litellm-Customer-Id": {"victim"}, "X-Litellm-Timeout": {"1"}, "Authorization": {"Bearer sk-attacker"},
	"X-Litellm-Spend-Logs-Metadata": {`{"run_id":"other"}`},
}

// UpstreamTrailers are response trailers a hostile upstream sends; the agent
// must see none of them.
var UpstreamTrailers = http.Header{"X-Litellm-Key-Spend": {"123.45"}, "X-Upstream-Secret": {"canary-trailer"}}

// testTrailers: the header allowlist governs trailers too, both ways, streamed
// or not: the upstream receives none of the agent's, the agent none of the
// upstream's.
func testTrailers(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-trailers"), litellmtest.WithResponseTrailers(UpstreamTrailers), litellmtest.WithEarlyHints(UpstreamTrailers))
	for i, body := range []string{chatBody, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"MARKER:t2"}]}`} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		// Informational answers (103 Early Hints) carry headers too: none of the
		// upstream's may reach the agent that way either.
		var informational []string
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			informational = append(informational, fmt.Sprintf("%d %v", code, h))
			return nil
		}})
		// An io.Reader of unknown length makes the client send a chunked body, the
		// only kind that can carry trailers.
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.run.BaseURL+"/v1/chat/completions", io.MultiReader(strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Trailer = SpoofedTrailers.Clone()
		resp, err := e.run.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "ECHO:") && !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, b)
		}
		if len(informational) > 0 {
			t.Errorf("call %d: the agent received the upstream's informational answers: %v", i, informational)
		}
		if len(resp.Trailer) > 0 || resp.Header.Get("Trailer") != "" {
			t.Errorf("call %d: the agent received the upstream's trailers: %v (announced %q)", i, resp.Trailer, resp.Header.Get("Trailer"))
		}
		for k := range UpstreamTrailers {
			if v := resp.Header.Get(k); v != "" {
				t.Errorf("call %d: the upstream's trailer %s reached the agent as a header: %q", i, k, v)
			}
		}
	}
	reqs := e.up.Requests()
	if len(reqs) != 2 {
		t.Fatalf("upstream saw %d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if len(r.Trailer) > 0 {
			t.Errorf("request %d: trailers reached the upstream: %v", i, r.Trailer)
		}
		for name, vals := range r.Header {
			for _, v := range vals {
				if strings.Contains(v, "victim") || strings.Contains(v, "attacker") || strings.Contains(v, `"other"`) || name == "X-Litellm-Timeout" {
					t.Errorf("request %d: header %s: %q reached the upstream", i, name, v)
				}
			}
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+e.up.MasterKey() {
			t.Errorf("request %d: Authorization = %q", i, got)
		}
	}
}

// upstreamBody decodes the i-th request body the upstream received.
func upstreamBody(t testing.TB, up *litellmtest.Server, i int) map[string]any {
	t.Helper()
	reqs := up.Requests()
	if len(reqs) <= i {
		t.Fatalf("upstream saw %d requests, want more than %d", len(reqs), i)
	}
	var m map[string]any
	if err := json.Unmarshal(reqs[i].Body, &m); err != nil {
		t.Fatalf("upstream body %q: %v", reqs[i].Body, err)
	}
	return m
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func testBodyPolicy(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-body"))
	hostile := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:b1"}],"temperature":0.5,` +
		`"user":"victim","user":"victim2","metadata":{"user_id":"victim","tags":["x"],"spend_logs_metadata":{"run_id":"other"}},` +
		`"litellm_metadata":{"user":"victim"},"spend_logs_metadata":{"run_id":"other"},"tags":["t"],"safety_identifier":"victim",` +
		`"api_key":"sk-other","api_base":"http://attacker.example","base_url":"http://attacker.example","\u0061pi_base":"http://attacker.example",` +
		`"mock_response":"free","extra_body":{"metadata":{"user_id":"victim"}},"success_callback":["webhook"],"store":true,"service_tier":"priority"}`
	r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", hostile, nil)
	if r.Status != 200 || !strings.Contains(r.Body, "ECHO:b1") {
		t.Fatalf("call: %d %s", r.Status, r.Body)
	}
	got := upstreamBody(t, e.up, 0)
	if ks := keysOf(got); !slices.Equal(ks, []string{"messages", "model", "temperature", "user"}) {
		t.Errorf("upstream body keys = %v", ks)
	}
	if got["user"] != account || got["temperature"] != 0.5 {
		t.Errorf("upstream body = %v", got)
	}
	// Every route with a body policy: attribution fields never pass; OpenAI-style
	// routes carry the run's account as "user".
	for _, c := range []struct {
		path, body string
		user       bool
	}{
		{"/v1/completions", `{"model":"gpt-4o-mini","prompt":"p","user":"victim","metadata":{"user_id":"v"}}`, true},
		{"/v1/embeddings", `{"model":"gpt-4o-mini","input":"p","user":"victim","litellm_metadata":{"user":"v"}}`, true},
		{"/v1/responses", `{"model":"gpt-4o-mini","input":"p","user":"victim","metadata":{"user_id":"v"},"previous_response_id":"resp_x","store":true}`, true},
		{"/v1/moderations", `{"input":"p","user":"victim","metadata":{"user_id":"v"}}`, false},
		{"/v1/messages", `{"model":"claude-haiku","max_tokens":8,"messages":[{"role":"user","content":"p"}],"metadata":{"user_id":"victim"},"litellm_metadata":{"user":"victim","tags":["x"]}}`, false},
	} {
		n := len(e.up.Requests())
		if r := Do(t, e.run, http.MethodPost, c.path, c.body, nil); r.Status != 200 {
			t.Errorf("%s: %d %s", c.path, r.Status, r.Body)
			continue
		}
		got := upstreamBody(t, e.up, n)
		for _, k := range []string{"metadata", "previous_response_id", "store"} {
			if _, ok := got[k]; ok {
				t.Errorf("%s: %q reached the upstream", c.path, k)
			}
		}
		if lm, ok := got["litellm_metadata"]; ok && (c.path != "/v1/messages" || !reflect.DeepEqual(lm, map[string]any{"user": account})) {
			t.Errorf("%s: litellm_metadata upstream = %v", c.path, lm)
		} else if !ok && c.path == "/v1/messages" {
			t.Errorf("/v1/messages: litellm_metadata.user is not the run's account")
		}
		if u, ok := got["user"]; (c.user && u != account) || (!c.user && ok) {
			t.Errorf("%s: upstream user = %v", c.path, u)
		}
	}
	// A stream always reports its usage, so the budget and the audit see it.
	n := len(e.up.Requests())
	Do(t, e.run, http.MethodPost, "/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"s"}]}`, nil)
	if so, _ := upstreamBody(t, e.up, n)["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options upstream = %v", so)
	}
}

func testNonJSON(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-nonjson"))
	for _, c := range []struct{ ct, body string }{
		{"text/plain", chatBody},
		{"application/x-www-form-urlencoded", "model=gpt-4o-mini&user=victim"},
		{"application/json", `[1,2]`},
		{"application/json", `"s"`},
		{"application/json", `null`},
		{"application/json", `{"model":"gpt-4o-mini"} {"user":"victim"}`},
		{"application/json", `{"model":`},
		{"application/json", ``},
	} {
		r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", c.body, http.Header{"Content-Type": {c.ct}})
		typ, code, msg := r.APIError()
		if r.Status != 400 || typ != "invalid_request_error" || code != "400" || !strings.HasPrefix(msg, "body_policy: ") {
			t.Errorf("%s %q: %d %s", c.ct, c.body, r.Status, r.Body)
		}
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Errorf("upstream saw %d requests, want none", n)
	}
	for _, rec := range AuditN(t, e.run, 8) {
		if rec.Blocked != "body_not_json" {
			t.Errorf("record %+v", rec)
		}
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
	count := statuses(t, e, 20, chatBody)
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

// routeCases call every allowlisted route, in its /v1 and bare forms.
var routeCases = []struct {
	method, path, body, want string
}{
	{"POST", "/v1/chat/completions", chatBody, `"chat.completion"`},
	{"POST", "/chat/completions", chatBody, `"chat.completion"`},
	{"POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"MARKER:s"}]}`, "data: [DONE]"},
	{"POST", "/v1/completions", `{"model":"gpt-4o-mini","prompt":"MARKER:c1 say"}`, `"text":"ECHO:c1"`},
	{"POST", "/v1/completions", `{"model":"gpt-4o-mini","prompt":"MARKER:c2","stream":true}`, `"object":"text_completion"`},
	{"POST", "/v1/embeddings", `{"model":"gpt-4o-mini","input":["a","bb"]}`, `"object":"embedding"`},
	{"POST", "/embeddings", `{"model":"gpt-4o-mini","input":"a"}`, `"object":"embedding"`},
	{"POST", "/v1/responses", `{"model":"gpt-4o-mini","input":"MARKER:r1 hi"}`, `"text":"ECHO:r1"`},
	{"POST", "/v1/responses", `{"model":"gpt-4o-mini","input":"MARKER:r2","stream":true}`, "event: response.completed"},
	{"POST", "/v1/moderations", `{"input":"hello"}`, `"flagged":false`},
	{"POST", "/v1/messages", `{"model":"claude-haiku","max_tokens":64,"messages":[{"role":"user","content":"MARKER:a1"}]}`, `"text":"ECHO:a1"`},
	{"POST", "/v1/messages", `{"model":"claude-haiku","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"MARKER:a2"}]}`, "event: message_stop"},
	{"GET", "/v1/models", "", `"object":"list"`},
	{"GET", "/models", "", `"object":"list"`},
	{"GET", "/v1/models/gpt-4o-mini", "", `"id":"gpt-4o-mini"`},
	{"GET", "/v1/models?team_id=other-team&return_wildcard_routes=true", "", `"object":"list"`},
}

func testRoutes(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-routes"))
	for i, c := range routeCases {
		r := Do(t, e.run, c.method, c.path, c.body, nil)
		if r.Status != 200 || !strings.Contains(r.Body, c.want) {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.Status, r.Body)
			continue
		}
		reqs := e.up.Requests()
		if len(reqs) != i+1 {
			t.Fatalf("%s %s: upstream saw %d requests, want %d", c.method, c.path, len(reqs), i+1)
		}
		got := reqs[i]
		want, _, _ := strings.Cut(c.path, "?")
		if !strings.HasPrefix(want, "/v1/") {
			want = "/v1" + want
		}
		if got.Method != c.method || got.Path != want || got.RawQuery != "" || got.Header.Get("Authorization") != "Bearer "+e.up.MasterKey() {
			t.Errorf("%s %s reached the upstream as %s %s?%s", c.method, c.path, got.Method, got.Path, got.RawQuery)
		}
	}
	recs := AuditN(t, e.run, len(routeCases))
	streamed := 0
	for _, rec := range recs {
		if rec.Blocked != "" || rec.Status != 200 || rec.Error != "" || rec.CallID == "" && rec.Method == "POST" && rec.Path != "/v1/moderations" {
			t.Errorf("record %+v", rec)
		}
		if rec.Streamed {
			streamed++
			if rec.RequestID == "" {
				t.Errorf("streamed %s has no response id in its record", rec.Path)
			}
		}
	}
	if streamed != 4 {
		t.Errorf("%d streamed records, want 4", streamed)
	}
}

// AdminRoutes are LiteLLM routes under /v1 (and bare) that manage the proxy or
// reach other tenants' resources; no front may forward them.
var AdminRoutes = []struct{ Method, Path string }{
	{"POST", "/v1/mcp/server"}, {"GET", "/v1/mcp/server"}, {"DELETE", "/v1/mcp/server/x"},
	{"GET", "/v1/agents"}, {"POST", "/v1/agents"}, {"GET", "/v1/model/info"}, {"GET", "/model/info"},
	{"GET", "/v1/files"}, {"POST", "/v1/files"}, {"GET", "/v1/files/file-1/content"},
	{"GET", "/v1/batches"}, {"POST", "/v1/batches"}, {"GET", "/v1/fine_tuning/jobs"},
	{"GET", "/v1/vector_stores"}, {"POST", "/v1/vector_stores"}, {"GET", "/v1/responses/resp_1"},
	{"DELETE", "/v1/responses/resp_1"}, {"POST", "/v1/chat/completions/x"}, {"GET", "/key/list"},
	{"GET", "/spend/logs"}, {"POST", "/v1/threads"}, {"POST", "/v1/images/generations"},
	{"POST", "/v1/audio/speech"}, {"GET", "/v1"}, {"GET", "/"},
}

func testAdminRoutes(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-admin"))
	for _, a := range AdminRoutes {
		body := ""
		if a.Method == "POST" {
			body = `{"model":"gpt-4o-mini"}`
		}
		r := Do(t, e.run, a.Method, a.Path, body, nil)
		typ, code, msg := r.APIError()
		if r.Status != 404 || typ != "not_found" || code != "404" || !strings.HasPrefix(msg, "route_allowlist: ") {
			t.Errorf("%s %s: %d %s", a.Method, a.Path, r.Status, r.Body)
		}
	}
	// A known route under another method is refused as such.
	for _, m := range []string{"GET", "DELETE", "PUT"} {
		r := Do(t, e.run, m, "/v1/chat/completions", "", nil)
		if _, _, msg := r.APIError(); r.Status != 405 || !strings.HasPrefix(msg, "route_allowlist: ") {
			t.Errorf("%s /v1/chat/completions: %d %s", m, r.Status, r.Body)
		}
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Errorf("upstream saw %d requests, want none", n)
	}
	for _, rec := range AuditN(t, e.run, len(AdminRoutes)+3) {
		if rec.Blocked != "route_not_allowed" && rec.Blocked != "method_not_allowed" {
			t.Errorf("record %+v", rec)
		}
	}
}

// NonCanonicalPaths are path forms an upstream router may read differently from
// the proxy; every front refuses them the same way.
var NonCanonicalPaths = []string{
	"/v1%2Fkey/list", "/v1/chat%2fcompletions", "/%76%31/models", "/v1/models%2F..%2F..%2Fkey%2Flist",
	"/v1/", "/v1//models", "/v1/./models", "/v1/models/.", "/v1/../key/list", "/v1/models/..",
	"/v1/chat/completions/", "/./v1/models", "/v1/models\\..\\x",
}

func testNonCanonical(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-canon"))
	for _, p := range NonCanonicalPaths {
		r := Do(t, e.run, http.MethodGet, p, "", nil)
		typ, code, msg := r.APIError()
		if r.Status != 400 || typ != "invalid_request_error" || code != "400" || !strings.HasPrefix(msg, "canonical_path: ") {
			t.Errorf("%s: %d %s", p, r.Status, r.Body)
		}
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Errorf("upstream saw %d requests, want none", n)
	}
	for _, rec := range AuditN(t, e.run, len(NonCanonicalPaths)) {
		if rec.Blocked != "path_not_canonical" {
			t.Errorf("record %+v", rec)
		}
	}
}

func testMaxTokensConcurrent(t *testing.T, nf NewFront) {
	const perCall, budget = 40, 100
	s := spec("run-tokens-conc")
	s.Budget.MaxTokens = budget
	e := newEnv(t, nf, s, litellmtest.WithReply(func(litellmtest.ChatRequest) litellmtest.Reply {
		return litellmtest.Reply{Content: "ok", PromptTokens: 10, CompletionTokens: perCall - 10}
	}))
	e.up.SetLatency(30 * time.Millisecond) // the calls overlap
	body := `{"model":"gpt-4o-mini","max_tokens":30,"messages":[{"role":"user","content":"hi"}]}`
	count := statuses(t, e, 20, body)
	// Every call forwarded used perCall tokens; the budget may be overshot by at
	// most one call's excess over its reservation, never by the concurrency.
	used := e.up.RequestCount("/v1/chat/completions") * perCall
	if used > budget+perCall || count[200] == 0 || count[200]+count[429] != 20 {
		t.Errorf("%d tokens used under a budget of %d (statuses %v)", used, budget, count)
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

func testUnbilledCap(t *testing.T, nf NewFront) {
	e := newEnv(t, nf, spec("run-unbilled-cap"))
	n := llmproxy.MaxUnbilledRecords + 200
	for range n {
		if r := Do(t, e.run, http.MethodGet, "/v1/models", "", nil); r.Status != 200 {
			t.Fatalf("GET /v1/models: %d", r.Status)
		}
	}
	if got := e.up.RequestCount("/v1/models"); got != n {
		t.Fatalf("upstream saw %d, want %d", got, n)
	}
	time.Sleep(50 * time.Millisecond)
	if got := len(e.run.Audit()); got != llmproxy.MaxUnbilledRecords {
		t.Errorf("records = %d, want the cap %d", got, llmproxy.MaxUnbilledRecords)
	}
	for range 3 {
		if r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", chatBody, nil); r.Status != 200 {
			t.Fatalf("billable call: %d", r.Status)
		}
	}
	if recs := AuditN(t, e.run, llmproxy.MaxUnbilledRecords+3); len(recs) != llmproxy.MaxUnbilledRecords+3 {
		t.Errorf("billable calls past the cap must be kept: %d records", len(recs))
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

// testMaxTokensWorstCase: with an upstream that bills every call the most its
// request allows (one token per body byte, every choice at its output cap, and
// far more without a cap), 60 concurrent calls of every shape (a cap of 1, no
// cap, n=4, caps spelled as 1e2 or "30", an image by URL) are charged in total
// at most the budget plus one call's excess: its body bytes plus its choices.
func testMaxTokensWorstCase(t *testing.T, nf NewFront) {
	const budget = 1000
	s := spec("run-tokens-worst")
	s.Budget.MaxTokens = budget
	e := newEnv(t, nf, s, litellmtest.WithMaxUsage())
	e.up.SetLatency(20 * time.Millisecond) // the calls overlap
	pad := strings.Repeat("x", 500)
	msg := `"messages":[{"role":"user","content":"` + pad + `"}]`
	bodies := []string{
		`{"model":"gpt-4o-mini","max_tokens":1,` + msg + `}`,
		`{"model":"gpt-4o-mini",` + msg + `}`,
		`{"model":"gpt-4o-mini","n":4,"max_completion_tokens":50,` + msg + `}`,
		`{"model":"gpt-4o-mini","max_tokens":1e2,"max_completion_tokens":"30",` + msg + `}`,
		`{"model":"gpt-4o-mini","stream":true,"n":2,` + msg + `}`,
		`{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://img.example/a.png"}}]}]}`,
	}
	total := burst(t, e, bodies)
	var excess int
	for i, r := range e.up.Requests() {
		var b map[string]any
		if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatalf("request %d body: %v", i, err)
		}
		n := 1
		if v, ok := b["n"].(float64); ok {
			n = int(v)
		}
		excess = max(excess, len(r.Body)+n)
		// Every forwarded call carries an integer output cap within the budget.
		capped := false
		for _, k := range []string{"max_tokens", "max_completion_tokens"} {
			if v, ok := b[k]; ok {
				f, isNum := v.(float64)
				if !isNum || f != float64(int(f)) || f < 1 || f > budget {
					t.Errorf("request %d: %s = %v reached the upstream", i, k, v)
				}
				capped = true
			}
		}
		if !capped {
			t.Errorf("request %d reached the upstream without an output cap: %s", i, r.Body)
		}
	}
	t.Logf("%d calls forwarded, %d tokens charged upstream on a budget of %d (one call's excess at most %d)", len(e.up.Requests()), total, budget, excess)
	if total > budget+excess {
		t.Errorf("the upstream charged %d tokens on a budget of %d: more than one call's excess (%d)", total, budget, excess)
	}
	// Choices past MaxChoices, or that are no integer, are refused.
	for _, bad := range []string{`"n":500`, `"n":1.5`, `"n":"x"`, `"best_of":0`} {
		n := len(e.up.Requests())
		r := Do(t, e.run, http.MethodPost, "/v1/completions", `{"model":"gpt-4o-mini","prompt":"p",`+bad+`}`, nil)
		if _, _, msg := r.APIError(); r.Status != 400 && r.Status != 429 || r.Status == 400 && !strings.HasPrefix(msg, "body_policy: ") {
			t.Errorf("%s: %d %s", bad, r.Status, r.Body)
		}
		if len(e.up.Requests()) != n {
			t.Errorf("%s reached the upstream", bad)
		}
	}
}

// statuses makes n concurrent chat calls through e's run, cycling through bodies,
// and counts their answers by status.
func statuses(t *testing.T, e *env, n int, bodies ...string) map[int]int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	count := map[int]int{}
	for i := range n {
		wg.Go(func() {
			r := Do(t, e.run, http.MethodPost, "/v1/chat/completions", bodies[i%len(bodies)], nil)
			mu.Lock()
			count[r.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return count
}

// burst makes 60 concurrent chat calls through e's run, cycling through bodies; every
// call must be answered 200 or 429 (some 200). It returns the tokens the upstream
// charged in all.
func burst(t *testing.T, e *env, bodies []string) int {
	t.Helper()
	count := statuses(t, e, 60, bodies...)
	if count[200] == 0 || count[200]+count[429] != 60 {
		t.Fatalf("statuses = %v, want 200s and 429s only", count)
	}
	total := 0
	for _, row := range e.up.SpendRows() {
		total += row.TotalTokens
	}
	return total
}
