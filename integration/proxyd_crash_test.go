package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/runtoken"
)

// holdWriter blocks a streamed answer after its first event until release is closed.
type holdWriter struct {
	http.ResponseWriter
	release <-chan struct{}
	n       int
}

func (h *holdWriter) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("data: ")) {
		if h.n == 1 {
			<-h.release
		}
		h.n++
	}
	return h.ResponseWriter.Write(p)
}

func (h *holdWriter) Flush() { h.ResponseWriter.(http.Flusher).Flush() }

// runHTTP is what the bridge does for a run: requests to its socket with its token.
func runHTTP(sock, token string) *http.Client {
	return &http.Client{Transport: &tokenRT{token: token, base: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}}
}

type tokenRT struct {
	base  http.RoundTripper
	token string
}

func (t *tokenRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(runtoken.Header, t.token)
	return t.base.RoundTrip(r)
}

const crashChat = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`

// call makes one non-streamed call and returns its call id once the whole answer
// arrived, or an error.
func call(ctx context.Context, c *http.Client) (status int, callID string, err error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://sandbox/v1/chat/completions", strings.NewReader(crashChat))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp.StatusCode, "", err
	}
	return resp.StatusCode, resp.Header.Get("X-Litellm-Call-Id"), nil
}

// TestProxydCrash: SIGKILL the daemon while 50 runs stream and make calls as fast
// as they can. Every client gets a clean error in bounded time; no record of a
// call whose answer a client received whole is lost; the restarted daemon serves
// the same runs at the same sockets; their budgets continue where they were,
// and no run's calls at the upstream exceed its budget.
func TestProxydCrash(t *testing.T) {
	const runs, budget = 50, 40
	fake, err := litellmtest.NewUnstartedServer(litellmtest.WithReply(func(litellmtest.ChatRequest) litellmtest.Reply {
		return litellmtest.Reply{Content: "a b c", Chunks: []string{"a ", "b ", "c"}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fake.Handler().ServeHTTP(&holdWriter{ResponseWriter: w, release: release}, r)
	}))
	defer func() { releaseOnce.Do(func() { close(release) }); up.Close(); fake.Close() }()

	d := startProxyd(t)
	m, err := proxyd.NewManager(d.client)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	type runState struct {
		p         *proxyd.Proxy
		c         *http.Client
		mu        sync.Mutex
		seen      []string // call ids of answers received whole
		streamErr error
		callErr   error
	}
	rs := make([]*runState, runs)
	for i := range rs {
		p, err := m.StartProxy(ctx, port.ProxySpec{RunID: fmt.Sprintf("crash-%02d", i), Upstream: up.URL, APIKey: fake.MasterKey(),
			Attribution: port.Attribution{BillingAccountID: "acct-crash"}, Budget: port.Budget{MaxCalls: budget}})
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = &runState{p: p, c: runHTTP(p.Registration().SocketPath, p.Registration().Token)}
	}
	// One held stream per run.
	var firstEvents, streams sync.WaitGroup
	for _, r := range rs {
		firstEvents.Add(1)
		streams.Add(1)
		go func() {
			defer streams.Done()
			req, _ := http.NewRequest(http.MethodPost, "http://sandbox/v1/chat/completions",
				strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := r.c.Do(req)
			if err != nil {
				firstEvents.Done()
				r.streamErr = err
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			got := false
			for {
				line, err := br.ReadString('\n')
				if strings.HasPrefix(line, "data: ") && !got {
					got = true
					firstEvents.Done()
				}
				if err != nil {
					if !got {
						firstEvents.Done()
					}
					r.streamErr = err
					return
				}
			}
		}()
	}
	firstEvents.Wait()
	// Calls as fast as each run can, until the daemon dies.
	var loops sync.WaitGroup
	for _, r := range rs {
		loops.Add(1)
		go func() {
			defer loops.Done()
			for {
				st, id, err := call(ctx, r.c)
				if err != nil {
					r.callErr = err
					return
				}
				if st != 200 {
					r.callErr = fmt.Errorf("status %d", st)
					return
				}
				r.mu.Lock()
				r.seen = append(r.seen, id)
				n := len(r.seen)
				r.mu.Unlock()
				if n >= budget/2 {
					return // leave half the budget for after the restart
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	d.stop(syscall.SIGKILL)
	loops.Wait()
	streams.Wait()
	if d := time.Since(killed); d > 10*time.Second {
		t.Errorf("clients took %v to see the daemon's death", d)
	}
	completedBefore := 0
	for i, r := range rs {
		if r.streamErr == nil || errors.Is(r.streamErr, context.DeadlineExceeded) {
			t.Errorf("run %d: the held stream ended without a clean error: %v", i, r.streamErr)
		}
		completedBefore += len(r.seen)
	}
	t.Logf("%d calls completed before the kill", completedBefore)
	if completedBefore == 0 {
		t.Fatal("no call completed before the kill; the test proves nothing")
	}

	// The same daemon comes back: same runs, same sockets, same tokens.
	d.start()
	releaseOnce.Do(func() { close(release) })
	list, err := d.client.List(ctx)
	if err != nil || len(list) != runs {
		t.Fatalf("after restart: %d runs (%v), want %d", len(list), err, runs)
	}
	for i, r := range rs {
		page, err := d.client.Audit(ctx, r.p.Registration().ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		ok := 0
		for _, rec := range page.Records {
			have[rec.CallID] = true
			if rec.Status == 200 && rec.Blocked == "" && rec.Error == "" {
				ok++
			}
		}
		for _, id := range r.seen {
			if !have[id] {
				t.Errorf("run %d: the record of completed call %s was lost", i, id)
			}
		}
		// The budget continues. Every call is counted before it is forwarded, so
		// the calls the crash cut (the held stream, and the call in flight when
		// the daemon died, if any) count although they left no record: budget-1
		// or budget-2 calls succeed in all, and the upstream never sees more than
		// the budget.
		for n := ok; ; n++ {
			st, _, err := call(ctx, r.c)
			if err != nil {
				t.Fatalf("run %d after restart: %v", i, err)
			}
			if st == 429 {
				if n != budget-1 && n != budget-2 {
					t.Errorf("run %d: the budget ran out after %d successful calls, want %d or %d", i, n, budget-2, budget-1)
				}
				break
			}
			if st != 200 || n > budget {
				t.Fatalf("run %d after restart: status %d after %d calls", i, st, n)
			}
		}
		runID := fmt.Sprintf("crash-%02d", i)
		seen := 0
		for _, rq := range fake.Requests() {
			if rq.Path == "/v1/chat/completions" && strings.Contains(rq.Header.Get("X-Litellm-Spend-Logs-Metadata"), `"run_id":"`+runID+`"`) {
				seen++
			}
		}
		if seen > budget {
			t.Errorf("run %d: the upstream saw %d calls on a budget of %d", i, seen, budget)
		}
	}
	for _, r := range rs {
		if _, err := r.p.Stop(ctx); err != nil {
			t.Error(err)
		}
	}
	if left, _ := d.client.List(ctx); len(left) != 0 {
		t.Errorf("%d runs left", len(left))
	}
}
