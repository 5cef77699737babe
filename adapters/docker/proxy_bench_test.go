package docker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// The proxy benchmarks put the in-process proxy, the nginx container proxy and a direct
// call to the same fake LiteLLM side by side in one loop, so each figure is read as a
// difference or ratio against the others from the same run.

type proxyTargets struct {
	fake                  *litellmtest.Server
	direct, inproc, nginx *http.Client
	directURL, proxiedURL string
	stopInproc, stopNginx func()
}

func unixKeepAlive(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableCompression: true,
	}}
}

func setupProxies(b *testing.B) *proxyTargets {
	nm, _, _, _ := proxyEnv(b, "bench")
	fake := litellmtest.NewServer()
	b.Cleanup(fake.Close)
	base, err := os.MkdirTemp("", "bench-inproc")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	im, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(testenv.Owner("bench")))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = im.Shutdown(context.Background()) })
	spec := func() port.ProxySpec {
		return port.ProxySpec{RunID: sandboxtest.RunID("bench"), Upstream: fake.URL, APIKey: fake.MasterKey(), Attribution: port.Attribution{BillingAccountID: "acct-bench"}}
	}
	ctx := context.Background()
	ip, err := im.Start(ctx, spec())
	if err != nil {
		b.Fatal(err)
	}
	np, err := nm.Start(ctx, spec())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = ip.Stop(ctx); _, _ = np.Stop(ctx) })
	return &proxyTargets{
		fake:       fake,
		direct:     &http.Client{Transport: &http.Transport{DisableCompression: true}},
		inproc:     unixKeepAlive(ip.Socket().HostDir + "/" + port.LLMSocketName),
		nginx:      unixKeepAlive(np.Socket().HostDir + "/" + port.LLMSocketName),
		directURL:  fake.URL + "/v1/chat/completions",
		proxiedURL: "http://proxy/v1/chat/completions",
	}
}

// call makes one completion and returns the time to the first body byte (ttfb) and to
// the end of the body.
func call(c *http.Client, url, key string, stream bool) (ttfb, total time.Duration, err error) {
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:bench"}],"stream":%v}`, stream)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.Peek(1); err != nil {
		return 0, 0, err
	}
	ttfb = time.Since(t0)
	if _, err := io.Copy(io.Discard, br); err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	return ttfb, time.Since(t0), nil
}

func benchProxies(b *testing.B, stream bool) {
	pt := setupProxies(b)
	key := pt.fake.MasterKey()
	var d, i, n []time.Duration
	pick := func(ttfb, total time.Duration) time.Duration {
		if stream {
			return ttfb
		}
		return total
	}
	for b.Loop() {
		for _, s := range []struct {
			c    *http.Client
			url  string
			key  string
			dest *[]time.Duration
		}{{pt.direct, pt.directURL, key, &d}, {pt.inproc, pt.proxiedURL, "", &i}, {pt.nginx, pt.proxiedURL, "", &n}} {
			ttfb, total, err := call(s.c, s.url, s.key, stream)
			if err != nil {
				b.Fatal(err)
			}
			*s.dest = append(*s.dest, pick(ttfb, total))
		}
	}
	prefix := "call"
	if stream {
		prefix = "ttft"
	}
	d50 := benchutil.Report(b, prefix+"-direct", d)
	i50 := benchutil.Report(b, prefix+"-inproc", i)
	n50 := benchutil.Report(b, prefix+"-nginx", n)
	b.ReportMetric(float64(i50-d50)/1e6, prefix+"-inproc-added-p50-ms")
	b.ReportMetric(float64(n50-d50)/1e6, prefix+"-nginx-added-p50-ms")
	b.ReportMetric(float64(benchutil.Quantile(i, .99)-benchutil.Quantile(d, .99))/1e6, prefix+"-inproc-added-p99-ms")
	b.ReportMetric(float64(benchutil.Quantile(n, .99)-benchutil.Quantile(d, .99))/1e6, prefix+"-nginx-added-p99-ms")
	benchutil.Ratio(b, prefix+"-inproc/nginx-p50-ratio", i50, n50)
	b.ReportMetric(0, "ns/op")
}

// BenchmarkProxyLatency: non-streamed completions, direct vs in-process vs nginx.
func BenchmarkProxyLatency(b *testing.B) { benchProxies(b, false) }

// BenchmarkProxyTTFT: time to the first streamed byte, direct vs in-process vs nginx.
func BenchmarkProxyTTFT(b *testing.B) { benchProxies(b, true) }

// BenchmarkProxyStartup alternates starting (until /health answers) and stopping an
// in-process proxy and an nginx container proxy; target: nginx/inproc >= 50.
func BenchmarkProxyStartup(b *testing.B) {
	nm, _, _, _ := proxyEnv(b, "bench")
	base, err := os.MkdirTemp("", "bench-inproc")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	im, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(testenv.Owner("bench")))
	if err != nil {
		b.Fatal(err)
	}
	defer im.Shutdown(context.Background())
	ctx := context.Background()
	spec := func() port.ProxySpec {
		return port.ProxySpec{RunID: sandboxtest.RunID("bench"), Upstream: "http://127.0.0.1:9", APIKey: "k", Attribution: port.Attribution{BillingAccountID: "a"}}
	}
	var ti, tn []time.Duration
	for b.Loop() {
		t0 := time.Now()
		ip, err := im.Start(ctx, spec())
		if err != nil {
			b.Fatal(err)
		}
		c := unixKeepAlive(ip.Socket().HostDir + "/" + port.LLMSocketName)
		if resp, err := c.Get("http://proxy/health"); err != nil || resp.StatusCode != 200 {
			b.Fatalf("inproc health: %v", err)
		} else {
			resp.Body.Close()
		}
		ti = append(ti, time.Since(t0))
		c.CloseIdleConnections()
		if _, err := ip.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		np, err := nm.Start(ctx, spec()) // returns once /health answers
		if err != nil {
			b.Fatal(err)
		}
		tn = append(tn, time.Since(t0))
		if _, err := np.Stop(ctx); err != nil {
			b.Fatal(err)
		}
	}
	i50 := benchutil.Report(b, "start-inproc", ti)
	n50 := benchutil.Report(b, "start-nginx", tn)
	benchutil.Ratio(b, "start-nginx/inproc-p50-ratio", n50, i50)
	b.ReportMetric(0, "ns/op")
}
