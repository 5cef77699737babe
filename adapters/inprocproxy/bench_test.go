package inprocproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Benchmarks compare the proxy with a direct call to the same loopback upstream in the
// same iteration, so machine noise hits both sides alike. Run them with
//
//	go test -run '^$' -bench 'Latency|TimeToFirst|StartStop' -benchtime 2000x ./adapters/inprocproxy/
//	go test -run '^$' -bench Concurrent -benchtime 3x ./adapters/inprocproxy/

func directClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}}
}

func doCall(c *http.Client, url, body string) error {
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// reportQuantiles reports the p50 and p99 of d in microseconds under name.
func reportQuantiles(b *testing.B, name string, d []time.Duration) (p50 float64) {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	q := func(f float64) float64 { return float64(d[int(f*float64(len(d)-1))]) / 1e3 }
	b.ReportMetric(q(0.50), name+"-p50-µs")
	b.ReportMetric(q(0.99), name+"-p99-µs")
	return q(0.50)
}

// BenchmarkAddedLatency: one non-streamed completion directly and one through the proxy
// per iteration; reports both distributions and the added p50.
func BenchmarkAddedLatency(b *testing.B) {
	up := newUpstream(b)
	m, _ := newManager(b)
	p := start(b, m, testSpec("bench-lat", up.URL))
	direct, proxied := directClient(), client(p)
	// Warm both connection pools.
	require.NoError(b, doCall(direct, up.URL+"/v1/chat/completions", chatRequest))
	require.NoError(b, doCall(proxied, "http://x/v1/chat/completions", chatRequest))
	var dd, pd []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if err := doCall(direct, up.URL+"/v1/chat/completions", chatRequest); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := doCall(proxied, "http://x/v1/chat/completions", chatRequest); err != nil {
			b.Fatal(err)
		}
		dd, pd = append(dd, t1.Sub(t0)), append(pd, time.Since(t1))
	}
	b.StopTimer()
	d50 := reportQuantiles(b, "direct", dd)
	p50 := reportQuantiles(b, "proxy", pd)
	b.ReportMetric(p50-d50, "added-p50-µs")
}

// sseUpstreamRoute streams n chunks; the first goes out at once, the rest after a flush.
func sseUpstreamRoute(n int) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for k := range n {
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-b\",\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", k)
			f.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// ttft returns the time to the first SSE data line, then drains the stream.
func ttft(c *http.Client, url string) (time.Duration, error) {
	t0 := time.Now()
	resp, err := c.Post(url, "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	d := time.Since(t0)
	if err != nil || !strings.HasPrefix(line, "data: ") {
		return 0, fmt.Errorf("first line %q: %v", line, err)
	}
	_, err = io.Copy(io.Discard, br)
	return d, err
}

// BenchmarkTimeToFirstToken: the first SSE chunk directly and through the proxy.
func BenchmarkTimeToFirstToken(b *testing.B) {
	up := newUpstream(b)
	up.setRoute(sseUpstreamRoute(8))
	m, _ := newManager(b)
	p := start(b, m, testSpec("bench-ttft", up.URL))
	direct, proxied := directClient(), client(p)
	var dd, pd []time.Duration
	for b.Loop() {
		d1, err := ttft(direct, up.URL+"/v1/chat/completions")
		if err != nil {
			b.Fatal(err)
		}
		d2, err := ttft(proxied, "http://x/v1/chat/completions")
		if err != nil {
			b.Fatal(err)
		}
		dd, pd = append(dd, d1), append(pd, d2)
	}
	b.StopTimer()
	d50 := reportQuantiles(b, "direct-ttft", dd)
	p50 := reportQuantiles(b, "proxy-ttft", pd)
	b.ReportMetric(p50-d50, "added-ttft-p50-µs")
}

// BenchmarkStartStop: the cost of a proxy's whole life without calls.
func BenchmarkStartStop(b *testing.B) {
	m, _ := newManager(b)
	spec := testSpec("bench-ss", "http://127.0.0.1:1")
	ctx := context.Background()
	for b.Loop() {
		p, err := m.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Stop(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// concurrentResult is what runConcurrent measured.
type concurrentResult struct {
	runs, errors int
	firstErr     error
	elapsed      time.Duration
	heapPerRun   float64 // bytes of live heap per run while all streams were open
}

// runConcurrent starts n proxies at once, opens one streaming call through each, and
// holds every stream open until all n are open at the same time; then it finishes the
// streams and stops the proxies, checking each audit record.
func runConcurrent(tb testing.TB, n int) concurrentResult {
	up := newUpstream(tb)
	var open atomic.Int64
	allOpen := make(chan struct{})
	var once sync.Once
	up.setRoute(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"id\":\"chatcmpl-c\",\"choices\":[]}\n\n")
		w.(http.Flusher).Flush()
		if open.Add(1) == int64(n) {
			once.Do(func() { close(allOpen) })
		}
		select {
		case <-allOpen:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: {\"id\":\"chatcmpl-c\",\"choices\":[],\"usage\":{\"total_tokens\":3}}\n\ndata: [DONE]\n\n")
	})
	m, _ := newManager(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var (
		mu       sync.Mutex
		errs     int
		firstErr error
		wg       sync.WaitGroup
		heap     atomic.Uint64
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if errs++; firstErr == nil {
			firstErr = err
		}
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	go func() { // measure the heap while every stream is open
		select {
		case <-allOpen:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heap.Store(ms.HeapAlloc)
		case <-ctx.Done():
		}
	}()
	t0 := time.Now()
	for i := range n {
		wg.Go(func() {
			p, err := m.StartProxy(ctx, testSpec(fmt.Sprintf("conc-%d", i), up.URL))
			if err != nil {
				fail(err)
				return
			}
			c := client(p)
			defer c.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
			resp, err := c.Do(req)
			if err != nil {
				fail(err)
				_, _ = p.Stop(ctx)
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
				fail(fmt.Errorf("run %d: body %q: %v", i, body, err))
			}
			recs, err := p.Stop(ctx)
			if err != nil || len(recs) != 1 || recs[0].RequestID != "chatcmpl-c" || recs[0].Error != "" {
				fail(fmt.Errorf("run %d: records %+v: %v", i, recs, err))
			}
		})
	}
	wg.Wait()
	res := concurrentResult{runs: n, errors: errs, firstErr: firstErr, elapsed: time.Since(t0)}
	if h := heap.Load(); h > before.HeapAlloc {
		res.heapPerRun = float64(h-before.HeapAlloc) / float64(n)
	}
	return res
}

// TestConcurrentRuns holds 500 per-run proxies, each with an open stream, at the same
// time (50 with -short).
func TestConcurrentRuns(t *testing.T) {
	n := 500
	if testing.Short() {
		n = 50
	}
	res := runConcurrent(t, n)
	assert.Zero(t, res.errors, "first error: %v", res.firstErr)
	t.Logf("%d concurrent runs with open streams: %d errors, %v, ~%.0f KiB heap per run", res.runs, res.errors, res.elapsed, res.heapPerRun/1024)
}

// BenchmarkConcurrentRuns500 reports the same as TestConcurrentRuns as metrics.
func BenchmarkConcurrentRuns500(b *testing.B) {
	for b.Loop() {
		res := runConcurrent(b, 500)
		if res.errors != 0 {
			b.Fatalf("%d errors, first: %v", res.errors, res.firstErr)
		}
		b.ReportMetric(float64(res.errors), "errors")
		b.ReportMetric(res.heapPerRun/1024, "heap-KiB/run")
	}
}

// TestNoGoroutineLeak runs proxies through calls, a cut stream and Stop, and checks that
// the goroutine count returns to where it was.
func TestNoGoroutineLeak(t *testing.T) {
	up := newUpstream(t)
	up.setRoute(sseUpstreamRoute(3))
	base := shortTempDir(t)
	// The upstream's goroutines and other tests' leftovers exist now and are not the
	// manager's; anything else still running at the end is.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m, err := NewManager(WithBaseDir(base))
	require.NoError(t, err)
	for i := range 3 {
		p := start(t, m, testSpec(fmt.Sprintf("leak-%d", i), up.URL))
		c := client(p)
		_, err := ttft(c, "http://x/v1/chat/completions")
		require.NoError(t, err)
		resp, _ := get(t, c, "/nope")
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		c.CloseIdleConnections()
		_, err = p.Stop(context.Background())
		require.NoError(t, err)
	}
	// One proxy left for Shutdown, with an idle client connection open.
	p := start(t, m, testSpec("leak-last", up.URL))
	c := client(p)
	_, _ = get(t, c, "/health")
	require.NoError(t, m.Shutdown(context.Background()))
	c.CloseIdleConnections()
}

// BenchmarkFirstByteUnderFlood: the time to the first byte of a victim run's
// call (a fresh connection each time, as an agent's SDK often opens), with the
// other runs quiet and with 20 runs each holding 70 slow connections (more than
// the manager's pool of 1,024), side by side in one run. Run it with
//
//	go test -run '^$' -bench FirstByteUnderFlood -benchtime 200x ./adapters/inprocproxy/
func BenchmarkFirstByteUnderFlood(b *testing.B) {
	up := newUpstream(b)
	m, _ := newManager(b)
	quiet := start(b, m, testSpec("bench-quiet", up.URL))
	victim := start(b, m, testSpec("bench-victim", up.URL))
	fresh := func(p *Proxy) *http.Client {
		c := client(p)
		c.Transport.(*http.Transport).DisableKeepAlives = true
		return c
	}
	ttfb := func(c *http.Client) time.Duration {
		t0 := time.Now()
		req, _ := http.NewRequest(http.MethodPost, "http://sandbox/v1/chat/completions", strings.NewReader(chatRequest))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return d
	}
	var qd []time.Duration
	for range 50 {
		qd = append(qd, ttfb(fresh(quiet)))
	}
	// The flood: 20 other runs, 70 idle connections each.
	var conns []net.Conn
	b.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range 20 {
		p := start(b, m, testSpec(fmt.Sprintf("bench-flood-%02d", i), up.URL))
		for range 70 {
			if c, err := (&net.Dialer{Timeout: time.Second}).Dial("unix", p.SocketPath()); err == nil {
				conns = append(conns, c)
			}
		}
	}
	time.Sleep(200 * time.Millisecond) // the flood's connections are accepted
	var fd []time.Duration
	c := fresh(victim)
	b.ResetTimer()
	for b.Loop() {
		fd = append(fd, ttfb(c))
	}
	b.StopTimer()
	q50 := reportQuantiles(b, "quiet", qd)
	f50 := reportQuantiles(b, "flooded", fd)
	b.ReportMetric(f50/q50, "flooded/quiet-p50")
	b.ReportMetric(float64(slices.Max(fd))/1e6, "flooded-max-ms")
}
