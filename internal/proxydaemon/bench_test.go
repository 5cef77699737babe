package proxydaemon_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	api "github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/port"
)

// Benchmarks of the shared daemon against the in-process per-run proxy, side by
// side in one run:
//
//	go test -run '^$' -bench 'SharedVsInproc' -benchtime 3000x ./internal/proxydaemon/
//	go test -run '^$' -bench 'ThousandRuns' -benchtime 3x ./internal/proxydaemon/
//	go test -run '^$' -bench 'Verify' ./runtoken/

const benchCompletion = `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`

func benchUpstream(b *testing.B) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Litellm-Call-Id", "call-1")
		if strings.Contains(r.Header.Get("Accept"), "event-stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, c := range []string{"a ", "b ", "c"} {
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", c)
				w.(http.Flusher).Flush()
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, benchCompletion)
	}))
	b.Cleanup(up.Close)
	return up
}

func benchSpec(runID, upstream string) port.ProxySpec {
	return port.ProxySpec{RunID: runID, Upstream: upstream, APIKey: "sk-bench", Attribution: port.Attribution{BillingAccountID: "acct-bench"}}
}

func unixClient(sock, token string) *http.Client {
	return &http.Client{Transport: tokenTransport{token: token, base: &http.Transport{
		DisableCompression: true, MaxIdleConnsPerHost: 4,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}}
}

func benchCall(c *http.Client, url string, stream bool) error {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func quantiles(b *testing.B, name string, d []time.Duration) (p50, p99 float64) {
	slices.Sort(d)
	q := func(f float64) float64 { return float64(d[int(f*float64(len(d)-1))]) / 1e3 }
	p50, p99 = q(0.5), q(0.99)
	b.ReportMetric(p50, name+"-p50-µs")
	b.ReportMetric(p99, name+"-p99-µs")
	return p50, p99
}

func inprocManager(b *testing.B) *inprocproxy.Manager {
	m, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(shortDir(b)), inprocproxy.WithConnLimits(64, 1<<16))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

// BenchmarkSharedVsInproc: per iteration one non-streamed call directly, one
// through an in-process proxy and one through the daemon (token checked), so
// noise hits all three alike; reports each p50/p99 and what each proxy adds.
func BenchmarkSharedVsInproc(b *testing.B) {
	up := benchUpstream(b)
	direct := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	ip, err := inprocManager(b).StartProxy(context.Background(), benchSpec("bench-inproc", up.URL))
	if err != nil {
		b.Fatal(err)
	}
	ic := unixClient(ip.SocketPath(), "")
	d := startDaemon(b, shortDir(b), nil)
	reg, err := d.client.Register(context.Background(), api.RegisterRequest{RunID: "bench-shared", Upstream: up.URL, APIKey: "sk-bench",
		Attribution: proxydapi.Attribution{BillingAccountID: "acct-bench"}})
	if err != nil {
		b.Fatal(err)
	}
	sc := unixClient(reg.SocketPath, reg.Token)
	var dd, di, ds []time.Duration
	for b.Loop() {
		for _, x := range []struct {
			c   *http.Client
			url string
			out *[]time.Duration
		}{{direct, up.URL + "/v1/chat/completions", &dd}, {ic, "http://run/v1/chat/completions", &di}, {sc, "http://run/v1/chat/completions", &ds}} {
			t0 := time.Now()
			if err := benchCall(x.c, x.url, false); err != nil {
				b.Fatal(err)
			}
			*x.out = append(*x.out, time.Since(t0))
		}
	}
	dp50, dp99 := quantiles(b, "direct", dd)
	ip50, ip99 := quantiles(b, "inproc", di)
	sp50, sp99 := quantiles(b, "shared", ds)
	b.ReportMetric(ip50-dp50, "inproc-added-p50-µs")
	b.ReportMetric(ip99-dp99, "inproc-added-p99-µs")
	b.ReportMetric(sp50-dp50, "shared-added-p50-µs")
	b.ReportMetric(sp99-dp99, "shared-added-p99-µs")
	b.ReportMetric((sp50-dp50)/(ip50-dp50), "shared/inproc-added-p50")
}

func liveBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// BenchmarkThousandRuns: 1,000 registered runs; every iteration all of them
// stream one call at once. Reports registrations per second, memory per idle
// run (heap and stacks of the serving process, before any connection), the
// calls' p50/p99 and the errors, for the daemon and for 1,000 in-process
// proxies in the same run.
func BenchmarkThousandRuns(b *testing.B) {
	const runs = 1000
	up := benchUpstream(b)
	for _, kind := range []string{"shared", "inproc"} {
		b.Run(kind, func(b *testing.B) {
			var clients []*http.Client
			var start func(i int) *http.Client
			switch kind {
			case "shared":
				d := startDaemon(b, shortDir(b), nil)
				start = func(i int) *http.Client {
					reg, err := d.srv.Register(context.Background(), api.RegisterRequest{RunID: fmt.Sprintf("run-%04d", i), Upstream: up.URL,
						APIKey: "sk-bench", Attribution: proxydapi.Attribution{BillingAccountID: "acct-bench"}})
					if err != nil {
						b.Fatal(err)
					}
					return unixClient(reg.SocketPath, reg.Token)
				}
			case "inproc":
				m := inprocManager(b)
				start = func(i int) *http.Client {
					p, err := m.StartProxy(context.Background(), benchSpec(fmt.Sprintf("run-%04d", i), up.URL))
					if err != nil {
						b.Fatal(err)
					}
					return unixClient(p.SocketPath(), "")
				}
			}
			before := liveBytes()
			t0 := time.Now()
			for i := range runs {
				clients = append(clients, start(i))
			}
			elapsed := time.Since(t0)
			after := liveBytes()
			var errs atomic.Int64
			var mu sync.Mutex
			var lat []time.Duration
			for b.Loop() {
				var wg sync.WaitGroup
				for _, c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						t := time.Now()
						if err := benchCall(c, "http://run/v1/chat/completions", true); err != nil {
							errs.Add(1)
							return
						}
						d := time.Since(t)
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			// Reported after the loop: b.Loop's first call resets the metrics.
			b.ReportMetric(float64(runs)/elapsed.Seconds(), "registrations/s")
			b.ReportMetric(float64(after-before)/runs/1024, "KiB/idle-run")
			b.ReportMetric(float64(errs.Load()), "errors")
			if len(lat) > 0 {
				quantiles(b, "stream", lat)
			}
			for _, c := range clients {
				c.CloseIdleConnections()
			}
		})
	}
}
