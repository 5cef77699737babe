package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/runtoken"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestProxydMetricsPrometheus: the daemon serves its metrics on an opt-in loopback
// listener; a real Prometheus (Debian's, scripts/install-prometheus.sh) scrapes it
// every second while 50 runs call through their sockets at once (each 4 chat calls
// under a budget of 3, and one call off the route allowlist), and answers PromQL
// queries with the call and refusal counts the daemon's audits hold. About 10 s.
func TestProxydMetricsPrometheus(t *testing.T) {
	promBin := testenv.NeedCommand(t, "prometheus", "prometheus")
	const runs, calls, budget = 50, 4, 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fake := litellmtest.NewServer()
	defer fake.Close()

	metricsAddr := freeLoopback(t)
	d := startProxyd(t, "-metrics-listen", metricsAddr)
	prom := startPrometheus(t, promBin, metricsAddr)

	// 50 runs at once, registered before any calls, so every scrape sees them all.
	regs := make([]proxyd.Registered, runs)
	for i := range regs {
		r, err := d.client.Register(ctx, proxyd.RegisterRequest{
			RunID: sandboxtest.RunID(fmt.Sprintf("prom%d", i)), Upstream: fake.URL, APIKey: fake.MasterKey(),
			Attribution: proxydapi.Attribution{BillingAccountID: "acct-prom"}, Budget: proxydapi.Budget{MaxCalls: budget},
		})
		if err != nil {
			t.Fatal(err)
		}
		regs[i] = r
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for _, r := range regs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := runSocketClient(r.SocketPath, r.Token)
			defer c.CloseIdleConnections()
			for i := 0; i < calls; i++ {
				want := http.StatusOK
				if i >= budget {
					want = http.StatusTooManyRequests
				}
				if code := runCall(ctx, c, http.MethodPost, "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`); code != want {
					errs <- fmt.Errorf("run %s call %d: status %d, want %d", r.RunID, i, code, want)
				}
			}
			if code := runCall(ctx, c, http.MethodGet, "/v1/files", ""); code != http.StatusNotFound {
				errs <- fmt.Errorf("run %s: /v1/files status %d", r.RunID, code)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// What the audits hold.
	var ok, refusedBudget, refusedRoute int
	for _, r := range regs {
		page, err := d.client.Audit(ctx, r.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Records {
			switch {
			case e.Blocked == "" && e.Status == 200:
				ok++
			case strings.HasPrefix(e.Blocked, "budget_exceeded"):
				refusedBudget++
			case e.Blocked == "route_not_allowed":
				refusedRoute++
			default:
				t.Errorf("unexpected record %+v", e)
			}
		}
	}
	if ok != runs*budget || refusedBudget != runs*(calls-budget) || refusedRoute != runs {
		t.Fatalf("audits: %d ok, %d budget, %d route refusals", ok, refusedBudget, refusedRoute)
	}

	// What Prometheus scraped, read back through its HTTP API.
	want := map[string]int{
		`sum(sandbox_llm_calls_total{sandbox_outcome="ok"})`:                                ok,
		`sum(sandbox_llm_calls_total{sandbox_outcome="refused"})`:                           refusedBudget + refusedRoute,
		`sum(sandbox_llm_refusals_total{sandbox_refusal_rule="budget_exceeded"})`:           refusedBudget,
		`sum(sandbox_llm_refusals_total{sandbox_refusal_rule="route_not_allowed"})`:         refusedRoute,
		`sum(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="chat"})`: ok,
		`max_over_time(sandbox_proxyd_runs[5m])`:                                            runs,
	}
	deadline := time.Now().Add(30 * time.Second)
	for q, n := range want {
		for {
			got, err := prom.query(ctx, q)
			if err == nil && got == n {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("PromQL %s = %d (%v), want %d", q, got, err, n)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// Input and output tokens, as the GenAI conventions name them.
	if in, err := prom.query(ctx, `sum(gen_ai_client_token_usage_sum{gen_ai_token_type="input"})`); err != nil || in <= 0 {
		t.Errorf("input tokens %d %v", in, err)
	}
	for _, r := range regs {
		if _, err := d.client.Deregister(ctx, r.ID, time.Second); err != nil {
			t.Error(err)
		}
	}
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func runSocketClient(sock, token string) *http.Client {
	return &http.Client{Transport: &promTokenRT{token: token, base: &http.Transport{
		DisableCompression: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}}
}

type promTokenRT struct {
	token string
	base  http.RoundTripper
}

func (t *promTokenRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(runtoken.Header, t.token)
	return t.base.RoundTrip(r)
}

func runCall(ctx context.Context, c *http.Client, method, path, body string) int {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, "http://sandbox"+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// promServer is a Prometheus the test started on loopback, scraping one target.
type promServer struct{ base string }

func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: proxyd\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopback(t)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	var out lockedBuf
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", out.String())
		}
	})
	p := &promServer{base: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready: %v\n%s", err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// query runs an instant PromQL query whose answer is one sample and returns it.
func (p *promServer) query(ctx context.Context, q string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/api/v1/query?query="+url.QueryEscape(q), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("prometheus: %s", r.Error)
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("%d samples", len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	f, err := strconv.ParseFloat(s, 64)
	return int(f), err
}

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
