package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// ProxyHarness is what TestProxyManager needs from a proxy adapter.
type ProxyHarness struct {
	// Manager is the adapter under test. Its proxies must reach an upstream on the
	// host's loopback.
	Manager port.ProxyManager
	// Runner runs the sandboxes that use the proxies; it must be configured with the
	// in-sandbox bridge (bridge.Build).
	Runner port.SandboxRunner
	// Image is the probe agent image (ProbeImage), already available to Runner.
	Image string
	// Budget, Attestation and BodyPolicy are used only for a Manager that does
	// not declare its capabilities (port.ProxyCapable); a declaring one is held to
	// its declaration instead.
	//
	// Budget says whether the manager enforces port.Budget; if not, it must refuse a
	// spec with a budget with port.ErrUnsupported.
	Budget bool
	// Attestation says whether the manager's proxies receive the bridge's
	// attestation (port.Attester); if not, they must refuse RequireAttestation with
	// port.ErrUnsupported.
	Attestation bool
	// BodyPolicy says whether the manager's proxies apply the route's body-key
	// allowlist and set the billing account as the body's user (the nginx proxy
	// cannot read bodies and forwards them as written, by the caller's choice).
	BodyPolicy bool
	// Kill ends a running proxy abruptly, as a crash would.
	Kill func(ctx context.Context, p port.Proxy) error
	// KillEndsSandbox says the runtime ends the sandbox when its proxy dies (Nomad's
	// sidecar in the sandbox's task group: the group fails as one). The agent may then be
	// SIGKILLed (exit 137) after it saw the broken call, before it exits on its own.
	KillEndsSandbox bool
	// Leftovers lists what the manager still holds for a run (containers, directories).
	Leftovers func(ctx context.Context, runID string) ([]string, error)
}

// TestProxyManager runs the proxy conformance suite: real sandboxes calling a fake
// LiteLLM (litellmtest) through the adapter's per-run proxy and the bridge, with every
// claim asserted where it matters (headers at the upstream, secrets in the sandbox).
func TestProxyManager(t *testing.T, h ProxyHarness) {
	if h.Manager == nil || h.Runner == nil || h.Image == "" || h.Kill == nil || h.Leftovers == nil {
		t.Fatal("sandboxtest: ProxyHarness needs Manager, Runner, Image, Kill and Leftovers")
	}
	if c, ok := h.Manager.(port.ProxyCapable); ok {
		caps := c.ProxyCapabilities()
		h.Budget, h.Attestation, h.BodyPolicy = caps.Budget, caps.Attestation, caps.BodyPolicy
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T, ProxyHarness)
	}{
		{"ChatAttributionAtUpstream", testChatAttribution},
		{"StreamChunksOneByOne", testStreamOneByOne},
		{"KeyNowhereInSandbox", testKeyNowhere},
		{"RunsCannotReachEachOther", testRunIsolation},
		{"HealthAndNotFound", testHealthAndNotFound},
		{"CallBudget", testCallBudget},
		{"TokenBudgetUnderConcurrency", testTokenBudgetConcurrent},
		{"FloodOfRunsCannotStarveAnother", testFairness},
		{"IsolationAttested", testIsolationAttested},
		{"RedTeam", testRedTeam},
		{"TrailersDropped", testTrailers},
		{"ResponseHeaderAllowlist", testResponseHeaderAllowlist},
		{"RequestFraming", testRequestFraming},
		{"UpstreamInformational", testUpstreamInformational},
		{"ProxyKilledMidStream", testProxyKilled},
		{"BadInputStartsNothing", testProxyBadInput},
		{"DeclaredRefusals", testProxyDeclaredRefusals},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, h)
		})
	}
}

// upstream is a fake LiteLLM behind an optional gate on streamed chunks.
type upstream struct {
	fake *litellmtest.Server
	http *httptest.Server
	gate func(k int) // called before streamed event k is written
}

func newUpstream(t *testing.T, opts ...litellmtest.Option) *upstream {
	fake, err := litellmtest.NewUnstartedServer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{fake: fake}
	u.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fake.Handler().ServeHTTP(&gatedWriter{ResponseWriter: w, gate: u.gate}, r)
	}))
	t.Cleanup(func() { u.http.Close(); fake.Close() })
	return u
}

// gatedWriter calls gate before each SSE event after the first, so a test can hold the
// stream until the agent has acknowledged what it got.
type gatedWriter struct {
	http.ResponseWriter
	gate func(int)
	n    int
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	if g.gate != nil && bytes.HasPrefix(p, []byte("data: ")) {
		g.gate(g.n)
		g.n++
	}
	return g.ResponseWriter.Write(p)
}

func (g *gatedWriter) Flush() {
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func randomKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "sk-canary-" + hex.EncodeToString(b)
}

func proxySpec(runID string, u *upstream) port.ProxySpec {
	return port.ProxySpec{
		RunID: runID, Attempt: 1, Upstream: u.http.URL, APIKey: u.fake.MasterKey(),
		Attribution: port.Attribution{BillingAccountID: "acct-" + runID, UserID: "user-7", GraphID: "sandbox:agent", SessionID: "sess-" + runID},
	}
}

// started starts a proxy and registers its Stop and the leftover check.
func started(t *testing.T, h ProxyHarness, spec port.ProxySpec) (port.Proxy, func() []port.AuditRecord) {
	t.Helper()
	p, err := h.Manager.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var once sync.Once
	var audit []port.AuditRecord
	stop := func() []port.AuditRecord {
		once.Do(func() {
			var err error
			audit, err = p.Stop(context.Background())
			if err != nil {
				t.Errorf("Stop: %v", err)
			}
			left, err := h.Leftovers(context.Background(), spec.RunID)
			if err != nil || len(left) > 0 {
				t.Errorf("after Stop, run %s left %v (%v)", spec.RunID, left, err)
			}
		})
		return audit
	}
	t.Cleanup(func() { stop() })
	return p, stop
}

func (h ProxyHarness) sandbox(t *testing.T, p port.Proxy, runID, workspace string, argv ...string) *port.RunResult {
	t.Helper()
	sock := p.Socket()
	res, err := h.Runner.RunOnce(context.Background(), port.RunSpec{
		RunID: runID, Image: h.Image, Argv: append([]string{"/agent"}, argv...), LLM: &sock,
		WorkspaceDir: workspace, Limits: port.Limits{Timeout: 2 * time.Minute},
	})
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	t.Logf("sandbox %v: exit %d\nstdout: %s\nstderr: %s", argv, res.ExitCode, clip(res.Stdout), clip(res.Stderr))
	return res
}

func chatRequests(u *upstream) []litellmtest.RecordedRequest {
	var out []litellmtest.RecordedRequest
	for _, r := range u.fake.Requests() {
		if strings.HasSuffix(r.Path, "/chat/completions") {
			out = append(out, r)
		}
	}
	return out
}

func testChatAttribution(t *testing.T, h ProxyHarness) {
	u := newUpstream(t)
	spec := proxySpec(RunID("attr"), u)
	p, stop := started(t, h, spec)
	res := h.sandbox(t, p, spec.RunID, "", "chat", "gpt-4o-mini", "MARKER:attr41", "--spoof")
	// litellmtest's default reply echoes MARKER:x as ECHO:x.
	if res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "status 200") || !strings.Contains(string(res.Stdout), "ECHO:attr41") {
		t.Fatalf("the agent's call failed: %s %s", res.Stdout, res.Stderr)
	}
	reqs := chatRequests(u)
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d chat requests, want 1", len(reqs))
	}
	hd := reqs[0].Header
	if got := hd.Get("Authorization"); got != "Bearer "+spec.APIKey {
		t.Errorf("upstream Authorization = %q, want the proxy's key", got)
	}
	if got := hd.Get("X-Litellm-End-User-Id"); got != spec.Attribution.BillingAccountID {
		t.Errorf("upstream end user = %q, want %q", got, spec.Attribution.BillingAccountID)
	}
	var md map[string]any
	if err := json.Unmarshal([]byte(hd.Get("X-Litellm-Spend-Logs-Metadata")), &md); err != nil {
		t.Fatalf("metadata header %q: %v", hd.Get("X-Litellm-Spend-Logs-Metadata"), err)
	}
	want := map[string]any{"run_id": spec.RunID, "attempt": float64(1), "user_id": "user-7", "graph_id": "sandbox:agent", "session_id": spec.Attribution.SessionID}
	for k, v := range want {
		if md[k] != v {
			t.Errorf("metadata %s = %v, want %v (all: %v)", k, md[k], v, md)
		}
	}
	for _, name := range []string{"X-Litellm-Customer-Id", "X-Api-Key", "Cookie"} {
		if v := hd.Get(name); v != "" {
			t.Errorf("spoofed %s reached the upstream: %q", name, v)
		}
	}
	for name, vals := range hd {
		for _, v := range vals {
			if strings.Contains(v, "forged") || strings.Contains(v, "victim") {
				t.Errorf("spoofed value reached the upstream in %s: %q", name, v)
			}
		}
	}
	audit := stop()
	if len(audit) != 1 {
		t.Fatalf("audit has %d records, want 1: %+v", len(audit), audit)
	}
	a := audit[0]
	if a.Status != 200 || a.RunID != spec.RunID || a.CallID == "" || a.Method != "POST" || !strings.HasSuffix(a.Path, "/chat/completions") {
		t.Errorf("audit record = %+v", a)
	}
	rows := waitSpendRows(t, u, 1)
	if rows[0].EndUser != spec.Attribution.BillingAccountID {
		t.Errorf("spend row end_user = %q", rows[0].EndUser)
	}
	if a.CallID != rows[0].LitellmCallID && a.RequestID != rows[0].RequestID {
		t.Errorf("audit ids (%q, %q) match no spend row (%q, %q)", a.CallID, a.RequestID, rows[0].LitellmCallID, rows[0].RequestID)
	}
}

func waitSpendRows(t *testing.T, u *upstream, n int) []litellmtest.SpendRow {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows := u.fake.SpendRows()
		if len(rows) >= n {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream has %d spend rows, want %d", len(rows), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFile waits for path to exist, or for stop.
func waitFile(path string, stop <-chan struct{}) bool {
	for {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		select {
		case <-stop:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func ackDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testStreamOneByOne(t *testing.T, h ProxyHarness) {
	u := newUpstream(t, litellmtest.WithReply(func(litellmtest.ChatRequest) litellmtest.Reply {
		return litellmtest.Reply{Content: "one two three four", Chunks: []string{"one ", "two ", "three ", "four"}}
	}))
	ws := ackDir(t)
	done := make(chan struct{})
	defer close(done)
	var held int
	u.gate = func(k int) {
		// Event k is written only once the agent, inside the sandbox, has written its
		// acknowledgement of event k-1: any buffering on the way deadlocks this test.
		if k > 0 && waitFile(filepath.Join(ws, fmt.Sprintf("chunk-%d", k-1)), done) {
			held++
		}
	}
	spec := proxySpec(RunID("stream"), u)
	p, stop := started(t, h, spec)
	res := h.sandbox(t, p, spec.RunID, ws, "stream", "gpt-4o-mini", "marker-stream", port.WorkspacePath)
	if res.ExitCode != 0 {
		t.Fatalf("stream failed: %s", res.Stderr)
	}
	out := string(res.Stdout)
	for _, w := range []string{`"one "`, `"two "`, `"three "`, `"four"`, "data: [DONE]"} {
		if !strings.Contains(out, w) {
			t.Errorf("stream lacks %s:\n%s", w, out)
		}
	}
	if held < 5 {
		t.Errorf("only %d events were held for acknowledgement", held)
	}
	audit := stop()
	if len(audit) != 1 || !audit[0].Streamed || audit[0].Status != 200 {
		t.Errorf("audit = %+v, want one streamed call", audit)
	}
}

func testKeyNowhere(t *testing.T, h ProxyHarness) {
	key := randomKey()
	u := newUpstream(t, litellmtest.WithMasterKey(key))
	spec := proxySpec(RunID("canary"), u)
	p, stop := started(t, h, spec)
	// The agent makes a call first, so the key has been used while the scan runs.
	if res := h.sandbox(t, p, spec.RunID, "", "chat", "gpt-4o-mini", "marker-canary"); res.ExitCode != 0 {
		t.Fatalf("call failed: %s", res.Stderr)
	}
	// The key goes in as two halves the agent joins in memory, so the scan's own
	// command line does not hold it.
	res := h.sandbox(t, p, spec.RunID, "", "scan", key[:len(key)/2], key[len(key)/2:])
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "clean" {
		t.Errorf("the key is visible in the sandbox: %s", res.Stdout)
	}
	// Control: the same scan does find a secret that is there.
	sock := p.Socket()
	ctl, err := h.Runner.RunOnce(context.Background(), port.RunSpec{
		RunID: spec.RunID, Image: h.Image, LLM: &sock, Env: map[string]string{"PLANTED": key},
		Argv: []string{"/agent", "scan", key[:len(key)/2], key[len(key)/2:]},
	})
	if err != nil || ctl.ExitCode != 5 || !strings.Contains(string(ctl.Stdout), "found in env") {
		t.Errorf("the scan missed a planted secret: %v %+v", err, ctl)
	}
	if len(stop()) != 1 {
		t.Error("the call was not audited")
	}
}

func testRunIsolation(t *testing.T, h ProxyHarness) {
	u := newUpstream(t)
	specA, specB := proxySpec(RunID("iso-a"), u), proxySpec(RunID("iso-b"), u)
	pa, _ := started(t, h, specA)
	pb, _ := started(t, h, specB)
	b := pb.Socket()
	bPath := b.HostDir
	if bPath == "" {
		bPath = b.Volume
	}
	res := h.sandbox(t, pa, specA.RunID, "", "cat", "/proc/self/mountinfo")
	// mountinfo shows a bind mount's host path, or a volume's name in its path.
	if strings.Contains(string(res.Stdout), bPath) {
		t.Errorf("run B's socket directory is mounted in run A:\n%s", res.Stdout)
	}
	if b.HostDir != "" {
		res = h.sandbox(t, pa, specA.RunID, "", "stat", filepath.Join(b.HostDir, port.LLMSocketName))
		if !strings.Contains(string(res.Stdout), "missing") {
			t.Errorf("run A sees run B's socket: %s", res.Stdout)
		}
	}
	res, err := h.Runner.RunOnce(context.Background(), port.RunSpec{
		RunID: specA.RunID, Image: h.Image, Argv: []string{"/agent", "write", port.LLMSocketDir + "/planted", "x"},
		LLM: ptr(pa.Socket()),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 4 {
		t.Errorf("the sandbox could write into its socket directory: exit %d %s", res.ExitCode, res.Stdout)
	}
}

func ptr[T any](v T) *T { return &v }

func testHealthAndNotFound(t *testing.T, h ProxyHarness) {
	u := newUpstream(t)
	spec := proxySpec(RunID("health"), u)
	p, stop := started(t, h, spec)
	res := h.sandbox(t, p, spec.RunID, "", "http", "http://127.0.0.1:8080/health")
	if !strings.HasPrefix(string(res.Stdout), "status 200") || !strings.Contains(string(res.Stdout), spec.RunID) {
		t.Errorf("/health: %s", res.Stdout)
	}
	for _, path := range []string{"/spend/logs", "/key/generate", "/"} {
		res = h.sandbox(t, p, spec.RunID, "", "http", "http://127.0.0.1:8080"+path)
		if !strings.HasPrefix(string(res.Stdout), "status 404") {
			t.Errorf("%s: %s, want 404", path, res.Stdout)
		}
	}
	for _, r := range u.fake.Requests() {
		t.Errorf("a refused request reached the upstream: %s %s", r.Method, r.Path)
	}
	for _, a := range stop() {
		if a.Status == 200 && a.Path != "/health" {
			t.Errorf("audit shows a forwarded call: %+v", a)
		}
	}
}

// refusedUnsupported checks that a manager without what spec asks for refuses
// it with port.ErrUnsupported and leaves nothing; accepted starts the failure.
func refusedUnsupported(t *testing.T, h ProxyHarness, spec port.ProxySpec, accepted string) {
	t.Helper()
	_, err := h.Manager.Start(context.Background(), spec)
	if !errors.Is(err, port.ErrUnsupported) {
		t.Fatalf("%s: %v", accepted, err)
	}
	if left, _ := h.Leftovers(context.Background(), spec.RunID); len(left) > 0 {
		t.Errorf("refused start left %v", left)
	}
}

func testCallBudget(t *testing.T, h ProxyHarness) {
	u := newUpstream(t)
	spec := proxySpec(RunID("budget"), u)
	spec.Budget = port.Budget{MaxCalls: 2}
	if !h.Budget {
		refusedUnsupported(t, h, spec, "a manager without budgets accepted one")
		return
	}
	p, stop := started(t, h, spec)
	res := h.sandbox(t, p, spec.RunID, "", "calls", "3", "gpt-4o-mini")
	if got := strings.Count(string(res.Stdout), "status 200"); got != 2 {
		t.Errorf("%d calls succeeded, want 2:\n%s", got, res.Stdout)
	}
	if !strings.Contains(string(res.Stdout), "status 429") || !strings.Contains(string(res.Stdout), "budget") {
		t.Errorf("call 3 was not refused with a budget error:\n%s", res.Stdout)
	}
	if n := len(chatRequests(u)); n != 2 {
		t.Errorf("upstream saw %d calls, want 2", n)
	}
	audit := stop()
	blocked := 0
	for _, a := range audit {
		if a.Blocked != "" {
			blocked++
		}
	}
	if len(audit) != 3 || blocked != 1 {
		t.Errorf("audit = %+v, want 3 records with 1 blocked", audit)
	}
}

// testTokenBudgetConcurrent: 40 concurrent calls from inside the sandbox, of
// shapes that defeat an estimate (a cap of 1 on a long prompt, no cap, n=4),
// against an upstream that bills each the most its request allows: the total
// charged stays within the budget plus one call's excess (its body bytes plus
// its choices, see port.Budget.MaxTokens).
func testTokenBudgetConcurrent(t *testing.T, h ProxyHarness) {
	const budget = 1000
	u := newUpstream(t, litellmtest.WithMaxUsage())
	u.fake.SetLatency(20 * time.Millisecond)
	spec := proxySpec(RunID("tokens"), u)
	spec.Budget = port.Budget{MaxTokens: budget}
	if !h.Budget {
		_, err := h.Manager.Start(context.Background(), spec)
		if !errors.Is(err, port.ErrUnsupported) {
			t.Fatalf("a manager without budgets accepted a token budget: %v", err)
		}
		return
	}
	p, stop := started(t, h, spec)
	msg := `"messages":[{"role":"user","content":"` + strings.Repeat("y", 400) + `"}]`
	res := h.sandbox(t, p, spec.RunID, "", "burst", "40",
		`{"model":"gpt-4o-mini","max_tokens":1,`+msg+`}`,
		`{"model":"gpt-4o-mini",`+msg+`}`,
		`{"model":"gpt-4o-mini","n":4,"max_completion_tokens":60,`+msg+`}`)
	if !strings.Contains(string(res.Stdout), "status 200") || !strings.Contains(string(res.Stdout), "status 429") {
		t.Errorf("want some calls through and the rest refused for the budget:\n%s", res.Stdout)
	}
	total, excess := 0, 0
	for _, row := range u.fake.SpendRows() {
		total += row.TotalTokens
	}
	for _, r := range chatRequests(u) {
		var b struct{ N int }
		_ = json.Unmarshal(r.Body, &b)
		excess = max(excess, len(r.Body)+max(b.N, 1))
	}
	t.Logf("%d calls forwarded, %d tokens charged on a budget of %d (one call's excess at most %d)", len(chatRequests(u)), total, budget, excess)
	if total > budget+excess {
		t.Errorf("the upstream charged %d tokens on a budget of %d: more than one call's excess (%d)", total, budget, excess)
	}
	stop()
}

// testFairness: 20 runs each hold 70 streaming calls open (the upstream holds
// them), more than a shared pool of 1,024 connections; a run started after
// them still gets its call through from inside its sandbox, because each run
// is guaranteed its share. On an unfair pool the victim's call waits as long
// as the flood is held (here: until its sandbox's time runs out). Managers
// whose sockets are not on the host's file system (per-run proxy containers,
// which share no pool) are not flooded from the host. About 5 s.
func testFairness(t *testing.T, h ProxyHarness) {
	const runs, perRun = 20, 70
	u := newUpstream(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free()
	u.gate = func(k int) {
		if k == 0 {
			<-release // every stream is held before its first event
		}
	}
	var flood []port.Proxy
	for i := range runs {
		p, _ := started(t, h, proxySpec(RunID(fmt.Sprintf("flood%02d", i)), u))
		flood = append(flood, p)
	}
	if flood[0].Socket().HostDir == "" {
		t.Logf("the manager's sockets are not on the host's file system (per-run proxies share no pool): not flooded")
		return
	}
	var wg sync.WaitGroup
	for _, p := range flood {
		dir := p.Socket().HostDir
		tok, _ := os.ReadFile(filepath.Join(dir, bridgeapi.TokenFile)) // a shared daemon's run token, if any
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, port.LLMSocketName))
		}}}
		for range perRun {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, "http://sandbox/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"flood"}]}`))
				req.Header.Set("Content-Type", "application/json")
				if len(tok) > 0 {
					req.Header.Set(bridgeapi.TokenHeader, strings.TrimSpace(string(tok)))
				}
				resp, err := c.Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
	}
	// The flood holds what it can: the upstream sees its streams arrive (at least
	// one per run), then no more.
	last, stable := -1, 0
	for deadline := time.Now().Add(60 * time.Second); stable < 5; {
		if time.Now().After(deadline) {
			t.Fatalf("the flood could not be set up: the upstream holds %d streams", last)
		}
		time.Sleep(100 * time.Millisecond)
		if n := len(chatRequests(u)); n == last && n >= runs {
			stable++
		} else {
			last, stable = n, 0
		}
	}
	t.Logf("the flood holds %d streams at the upstream", last)
	spec := proxySpec(RunID("victim"), u)
	victim, _ := started(t, h, spec)
	sock := victim.Socket()
	res, err := h.Runner.RunOnce(context.Background(), port.RunSpec{
		RunID: spec.RunID, Image: h.Image, Argv: []string{"/agent", "chat", "gpt-4o-mini", "MARKER:fair1"}, LLM: &sock,
		Limits: port.Limits{Timeout: 45 * time.Second},
	})
	free()
	wg.Wait()
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if !strings.HasPrefix(string(res.Stdout), "status 200") || !strings.Contains(string(res.Stdout), "ECHO:fair1") {
		t.Errorf("the victim run's call did not get through while the flood held its calls: exit %d %s %s", res.ExitCode, clip(res.Stdout), clip(res.Stderr))
	}
	seen := false
	for _, r := range chatRequests(u) {
		if strings.Contains(string(r.Body), "MARKER:fair1") && r.Header.Get("X-Litellm-End-User-Id") == spec.Attribution.BillingAccountID {
			seen = true
		}
	}
	if !seen {
		t.Error("the victim's call never reached the upstream")
	}
}

func testProxyKilled(t *testing.T, h ProxyHarness) {
	u := newUpstream(t, litellmtest.WithReply(func(litellmtest.ChatRequest) litellmtest.Reply {
		return litellmtest.Reply{Content: "a b c", Chunks: []string{"a ", "b ", "c"}}
	}))
	ws := ackDir(t)
	spec := proxySpec(RunID("killed"), u)
	p, stop := started(t, h, spec)
	killed := make(chan struct{})
	var once sync.Once
	u.gate = func(k int) {
		if k == 1 {
			// The agent has the first event; now the proxy dies mid-stream.
			waitFile(filepath.Join(ws, "chunk-0"), killed)
			once.Do(func() {
				if err := h.Kill(context.Background(), p); err != nil {
					t.Errorf("kill: %v", err)
				}
				close(killed)
			})
		}
	}
	sock := p.Socket()
	start := time.Now()
	res, err := h.Runner.RunOnce(context.Background(), port.RunSpec{
		RunID: spec.RunID, Image: h.Image, Argv: []string{"/agent", "stream", "gpt-4o-mini", "m", port.WorkspacePath},
		LLM: &sock, WorkspaceDir: ws, Limits: port.Limits{Timeout: 2 * time.Minute},
	})
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	ended := res.ExitCode == 3 || h.KillEndsSandbox && res.ExitCode == 137
	if !ended || !strings.Contains(string(res.Stderr), "stream broken") && !strings.Contains(string(res.Stderr), "llm call failed") {
		t.Errorf("the agent did not see a clear failure: exit %d stdout %s stderr %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if d := time.Since(start); d > 90*time.Second {
		t.Errorf("the run took %v after the proxy died", d)
	}
	_, _ = p.Stop(context.Background())
	stop()
}

func testProxyBadInput(t *testing.T, h ProxyHarness) {
	u := newUpstream(t)
	for name, mut := range map[string]func(*port.ProxySpec){
		"run id with slash":    func(s *port.ProxySpec) { s.RunID = "../x" },
		"CRLF in account":      func(s *port.ProxySpec) { s.Attribution.BillingAccountID = "a\r\nX-Injected: 1" },
		"LF in session":        func(s *port.ProxySpec) { s.Attribution.SessionID = "s\nx" },
		"oversized trace id":   func(s *port.ProxySpec) { s.Attribution.ExistingTraceID = strings.Repeat("t", 5000) },
		"quote in key":         func(s *port.ProxySpec) { s.APIKey = `k"; return 200; #` },
		"upstream with creds":  func(s *port.ProxySpec) { s.Upstream = "http://user:pass@127.0.0.1:1" },
		"upstream not http":    func(s *port.ProxySpec) { s.Upstream = "file:///etc/passwd" },
		"reserved label":       func(s *port.ProxySpec) { s.Labels = map[string]string{port.LabelOwner: "x"} },
		"missing billing user": func(s *port.ProxySpec) { s.Attribution.BillingAccountID = "" },
	} {
		spec := proxySpec(RunID("bad"), u)
		mut(&spec)
		p, err := h.Manager.Start(context.Background(), spec)
		if !errors.Is(err, port.ErrInvalidSpec) || p != nil {
			t.Errorf("%s: err = %v, want ErrInvalidSpec and no proxy", name, err)
		}
		if port.ValidateRunID(spec.RunID) == nil {
			if left, _ := h.Leftovers(context.Background(), spec.RunID); len(left) > 0 {
				t.Errorf("%s: refused start left %v", name, left)
			}
		}
	}
}

// testIsolationAttested: the bridge reports the sandbox's isolation before the agent
// starts; with RequireAttestation the agent's first call already passes; the report
// shows the promised lockdown; the agent cannot replace it with its own, and cannot
// read the attestation key that tells the bridge's report from its own.
func testIsolationAttested(t *testing.T, h ProxyHarness) {
	u := newUpstream(t)
	spec := proxySpec(RunID("attest"), u)
	spec.RequireAttestation = true
	if !h.Attestation {
		refusedUnsupported(t, h, spec, "a manager without attestation accepted RequireAttestation")
		return
	}
	p, stop := started(t, h, spec)
	forged := `{"uid":4242,"interfaces":["lo"],"cap_eff":"0","cap_prm":"0","cap_bnd":"0","no_new_privs":true,"seccomp":2,"read_only_root":true,"open_files":16,"pids_max":"1"}`
	res := h.sandbox(t, p, spec.RunID, "", "calls", "1", "gpt-4o-mini")
	if !strings.Contains(string(res.Stdout), "status 200") {
		t.Errorf("the agent's first call did not pass the attestation gate:\n%s", res.Stdout)
	}
	// The agent's own report is refused for want of the run's attestation key,
	// before its order matters (a process that got in before the bridge, a
	// pre-booted runtime, is refused the same: TestPreloadAttestation).
	res = h.sandbox(t, p, spec.RunID+"-again", "", "post", "http://127.0.0.1:8080"+port.AttestationPath, forged)
	if !strings.Contains(string(res.Stdout), "status 403") {
		t.Errorf("the agent's own attestation was not refused as not the bridge's (403):\n%s", res.Stdout)
	}
	// The key is the bridge's alone: nowhere the agent can read while the bridge
	// that holds it runs (its environment, the processes' environments and
	// command lines, the files). The scan is the one that finds a planted
	// upstream key (KeyNowhereInSandbox).
	key := p.Socket().AttestKey
	if !bridgeapi.ValidAttestKey(key) {
		t.Fatalf("the proxy's socket carries no attestation key (%q)", key)
	}
	res = h.sandbox(t, p, spec.RunID+"-scan", "", "scan", key[:len(key)/2], key[len(key)/2:])
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "clean" {
		t.Errorf("the attestation key is visible in the sandbox: %s", res.Stdout)
	}
	at, ok := p.(port.Attester)
	if !ok {
		t.Fatal("the manager declares attestation but its proxy is no port.Attester")
	}
	a := at.Attestation()
	if a == nil {
		t.Fatal("no attestation recorded")
	}
	t.Logf("attestation: %+v", *a)
	if v := a.Violations(); len(v) > 0 {
		t.Errorf("the sandbox attested violations: %v", v)
	}
	if len(a.Interfaces) != 1 || a.Interfaces[0] != "lo" || a.UID != 1001 || a.OpenFiles != port.DefaultOpenFiles {
		t.Errorf("attestation %+v: want only lo, uid 1001, %d open files", *a, port.DefaultOpenFiles)
	}
	// The kernel seen inside is the one of the runtime the runner chose, and the host's
	// record of that runtime judges it.
	var runtime string
	if rr, ok := h.Runner.(port.RuntimeReporter); ok {
		runtime = rr.Runtime()
	}
	if want := port.RuntimeKernel(runtime); a.Kernel != want || a.KernelVersion == "" {
		t.Errorf("attested kernel %q (%q), want %q for runtime %q", a.Kernel, a.KernelVersion, want, runtime)
	}
	judged := *a
	judged.Runtime = runtime
	if v := judged.Violations(); len(v) > 0 {
		t.Errorf("with the host's runtime %q recorded: violations %v", runtime, v)
	}
	if runtime != "" { // "" is the daemon's default runtime: nothing to compare with
		other := port.KernelGVisor
		if a.Kernel == port.KernelGVisor {
			other = port.KernelLinux
		}
		judged.Kernel = other
		if v := judged.Violations(); len(v) == 0 {
			t.Errorf("kernel %q with runtime %q was not judged a violation", other, runtime)
		}
	}
	stop()
}

// redTeamRequest is one attack the agent sends through the bridge, as written.
type redTeamRequest struct {
	Method  string      `json:"method"`
	Path    string      `json:"path"`
	Headers [][2]string `json:"headers,omitempty"`
	Body    string      `json:"body,omitempty"`
}

// testRedTeam sends, from inside a real sandbox, the attacks of an adversarial review
// and checks at the upstream that none of them took effect: LiteLLM's admin and
// shared-resource routes, non-canonical paths, attribution and credential headers in
// every spelling, and (where the proxy reads bodies) body fields that move billing or
// routing.
func testRedTeam(t *testing.T, h ProxyHarness) {
	u := newUpstream(t)
	spec := proxySpec(RunID("redteam"), u)
	p, stop := started(t, h, spec)
	reqs, firstHeaderAttack := redTeamRequests()
	ws := requestsWorkspace(t, reqs)
	res := h.sandbox(t, p, spec.RunID, ws, "reqs", port.WorkspacePath+"/reqs.jsonl")
	statuses := map[int]string{}
	for _, l := range lines0(res.Stdout) {
		var i int
		var st string
		if _, err := fmt.Sscanf(l, "req %d status %s", &i, &st); err == nil {
			statuses[i] = st
		}
	}
	for i := 0; i < firstHeaderAttack; i++ {
		if st := statuses[i]; !strings.HasPrefix(st, "4") {
			t.Errorf("%s %s answered %q, want a 4xx refusal", reqs[i].Method, reqs[i].Path, st)
		}
	}
	for i := firstHeaderAttack; i < len(reqs); i++ {
		if statuses[i] != "200" {
			t.Errorf("allowed call %d answered %q, want 200", i, statuses[i])
		}
	}
	// At the upstream: only the two allowed calls, with our key and attribution only.
	seen := u.fake.Requests()
	if len(seen) != 2 {
		var paths []string
		for _, r := range seen {
			paths = append(paths, r.Method+" "+r.Path)
		}
		t.Fatalf("the upstream saw %d requests %v, want the 2 allowed calls", len(seen), paths)
	}
	for _, r := range seen {
		if r.Path != "/v1/chat/completions" {
			t.Errorf("the upstream saw %s %s", r.Method, r.Path)
		}
		for name, vals := range r.Header {
			for _, v := range vals {
				if strings.Contains(v, "victim") || strings.Contains(v, "sk-attacker") || strings.Contains(v, `"other"`) {
					t.Errorf("header %s: %q reached the upstream", name, v)
				}
			}
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+u.fake.MasterKey() {
			t.Errorf("Authorization at the upstream: %q", got)
		}
		if got := r.Header.Get("X-Litellm-End-User-Id"); got != spec.Attribution.BillingAccountID {
			t.Errorf("end user at the upstream: %q", got)
		}
	}
	body := string(seen[1].Body)
	if !h.BodyPolicy {
		t.Logf("the manager declares no body policy: the body reached the upstream as written")
	} else {
		for _, bad := range []string{"victim", "attacker", "sk-attacker", "mock_response", `"other"`, "metadata", "tags"} {
			if strings.Contains(body, bad) {
				t.Errorf("body field %q reached the upstream: %s", bad, body)
			}
		}
		if !strings.Contains(body, `"user":"`+spec.Attribution.BillingAccountID+`"`) {
			t.Errorf("the body's user is not the billing account: %s", body)
		}
	}
	stop()
}

// redTeamRequests are the attacks testRedTeam sends; those from firstHeaderAttack
// on are allowed calls carrying forbidden headers or body fields (the ones before
// must be refused).
func redTeamRequests() (reqs []redTeamRequest, firstHeaderAttack int) {
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	attackBody := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"user":"victim",` +
		`"metadata":{"user_id":"victim","spend_logs_metadata":{"run_id":"other"}},"litellm_metadata":{"user":"victim"},` +
		`"spend_logs_metadata":{"run_id":"other"},"api_base":"http://attacker.example","base_url":"http://attacker.example",` +
		`"api_key":"sk-attacker","mock_response":"free","safety_identifier":"victim","tags":["other"]}`
	ctype := [2]string{"Content-Type", "application/json"}
	// 1. Admin and shared-resource routes LiteLLM serves under /v1 with our key.
	admin := []string{"/v1/mcp/server", "/v1/agents", "/v1/model/info", "/v1/files", "/v1/batches",
		"/v1/fine_tuning/jobs", "/v1/vector_stores", "/v1/key/generate", "/v1/spend/logs", "/key/list"}
	for _, a := range admin {
		reqs = append(reqs, redTeamRequest{Method: "GET", Path: a}, redTeamRequest{Method: "POST", Path: a, Headers: [][2]string{ctype}, Body: "{}"})
	}
	// 2. Raw paths that normalise into another route.
	raw := []string{"/v1%2Fkey/list", "/v1/chat/completions/../../key/generate", "/v1/./key/list", "/v1//key/list",
		"/v1/chat//completions", "/v1/chat/%63ompletions"}
	for _, r := range raw {
		reqs = append(reqs, redTeamRequest{Method: "POST", Path: r, Headers: [][2]string{ctype}, Body: chat})
	}
	firstHeaderAttack = len(reqs)
	// 3. One allowed call carrying every attribution and credential header spelling.
	reqs = append(reqs, redTeamRequest{Method: "POST", Path: "/v1/chat/completions", Body: chat, Headers: [][2]string{ctype,
		{"Authorization", "Bearer sk-attacker"}, {"X-Api-Key", "sk-attacker"}, {"Api-Key", "sk-attacker"},
		{"X-Litellm-End-User-Id", "victim"}, {"X_litellm_end_user_id", "victim"}, {"X-Litellm-Customer-Id", "victim"},
		{"X-Litellm-Spend-Logs-Metadata", `{"run_id":"other"}`}, {"Openai-Organization", "org-victim"},
		{"Openai-Project", "proj-victim"}, {"Anthropic-Api-Key", "sk-attacker"}, {"X-Pass-Authorization", "sk-attacker"},
		{"X-Langfuse-Session-Id", "victim"}, {"X-Trace-Session-Id", "victim"}, {"Cookie", "session=victim"}}})
	// 4. One allowed call whose body tries to move billing or routing.
	reqs = append(reqs, redTeamRequest{Method: "POST", Path: "/v1/chat/completions", Headers: [][2]string{ctype}, Body: attackBody})

	return reqs, firstHeaderAttack
}

// requestsWorkspace is a workspace the sandbox user can read holding reqs as
// reqs.jsonl, one JSON request a line, for the probe's "reqs" command.
func requestsWorkspace(t *testing.T, reqs []redTeamRequest) string {
	t.Helper()
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, r := range reqs {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(filepath.Join(ws, "reqs.jsonl"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws
}

// testTrailers: the header allowlist governs trailers as it governs headers. A
// chunked request from inside the sandbox whose trailers carry credentials and
// attribution reaches the upstream without them, and the upstream's response
// trailers (here the shared key's spend) never reach the agent.
func testTrailers(t *testing.T, h ProxyHarness) {
	up := http.Header{"X-Litellm-Key-Spend": {"123.45"}, "X-Upstream-Secret": {"canary-trailer"}}
	u := newUpstream(t, litellmtest.WithResponseTrailers(up))
	spec := proxySpec(RunID("trailers"), u)
	p, stop := started(t, h, spec)
	spoof := []string{"Api-Key=sk-attacker", "Openai-Organization=org-victim", "X-Litellm-Tags=victim-tag",
		"X-Litellm-Customer-Id=victim", "X-Litellm-Timeout=1", "Authorization=Bearer sk-attacker",
		"X-Litellm-End-User-Id=victim", `X-Litellm-Spend-Logs-Metadata={"run_id":"other"}`}
	for _, body := range []string{
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:tr1"}]}`,
		`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"MARKER:tr2"}]}`,
	} {
		res := h.sandbox(t, p, spec.RunID, "", append([]string{"trailers", "/v1/chat/completions", body}, spoof...)...)
		out := string(res.Stdout)
		if res.ExitCode != 0 || !strings.HasPrefix(out, "status 200") || !strings.Contains(out, "ECHO:tr") {
			t.Errorf("the chunked call failed: exit %d %s %s", res.ExitCode, out, res.Stderr)
		}
		for _, bad := range []string{"trailer ", "announced ", "123.45", "canary-trailer"} {
			if strings.Contains(out, bad) {
				t.Errorf("the upstream's trailers reached the agent (%q):\n%s", bad, out)
			}
		}
	}
	seen := chatRequests(u)
	if len(seen) != 2 {
		t.Fatalf("the upstream saw %d chat requests, want 2", len(seen))
	}
	for i, r := range seen {
		if len(r.Trailer) > 0 {
			t.Errorf("request %d: trailers reached the upstream: %v", i, r.Trailer)
		}
		for name, vals := range r.Header {
			for _, v := range vals {
				if strings.Contains(v, "victim") || strings.Contains(v, "attacker") || strings.Contains(v, `"other"`) || name == "X-Litellm-Timeout" {
					t.Errorf("request %d: %s: %q reached the upstream", i, name, v)
				}
			}
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+u.fake.MasterKey() {
			t.Errorf("request %d: Authorization at the upstream: %q", i, got)
		}
		if got := r.Header.Get("X-Litellm-End-User-Id"); got != spec.Attribution.BillingAccountID {
			t.Errorf("request %d: end user at the upstream: %q", i, got)
		}
	}
	stop()
}

func lines0(b []byte) []string { return strings.Split(strings.TrimSpace(string(b)), "\n") }
