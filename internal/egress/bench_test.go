package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
)

// Benchmarks compare each way through the egress proxy with a direct call to the same
// loopback upstream in the same iteration, so machine noise hits both alike:
//
//	go test -run '^$' -bench 'Egress' -benchtime 2000x ./internal/egress/
//	go test -run '^$' -bench 'EgressTunnelThroughput' -benchtime 20x ./internal/egress/
//
// The proxy listens on loopback TCP here; in a sandbox the bridge adds its own byte
// pipe in front of the unix socket (measured with the LLM proxy).

func get(c *http.Client, req func() *http.Request) error {
	resp, err := c.Do(req())
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

func timed(b *testing.B, d *[]time.Duration, f func() error) {
	t0 := time.Now()
	if err := f(); err != nil {
		b.Fatal(err)
	}
	*d = append(*d, time.Since(t0))
}

// directClient dials the upstream itself (the name resolved to loopback), trusting
// its CA.
func (h *harness) directClient(keepAlive bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: h.up.Pool},
		DisableKeepAlives: !keepAlive,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, p, _ := net.SplitHostPort(addr)
			return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+p)
		},
	}}
}

// BenchmarkEgressLatency: per iteration one request each way: direct HTTPS, /proxy,
// through CONNECT with TLS terminated (kept-alive tunnel), direct plain HTTP and
// forward HTTP. Reports the distributions and the added p50 and p99.
func BenchmarkEgressLatency(b *testing.B) {
	h := newHarness(b, noRateLimit)
	h.up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) })
	h.plain.Handler = h.up.Handler
	direct, viaProxy, endpoint := h.directClient(true), h.client(), &http.Client{}
	tlsURL := h.url("api.test", "/v1/x")
	plainURL := "http://plain.test:" + h.plain.Port() + "/x"
	mk := func(u string, hdr map[string]string) func() *http.Request {
		return func() *http.Request {
			r, _ := http.NewRequest("GET", u, nil)
			for k, v := range hdr {
				r.Header.Set(k, v)
			}
			return r
		}
	}
	auth := map[string]string{"Authorization": "Bearer {{token}}"}
	reqDirect := mk(tlsURL, map[string]string{"Authorization": "Bearer " + canary})
	reqEndpoint := mk("http://"+h.addr+EndpointPath, map[string]string{"X-Provider": "api", "X-Target": tlsURL, "Authorization": "Bearer {{token}}"})
	reqMITM := mk(tlsURL, auth)
	reqPlainDirect := mk(plainURL, map[string]string{"X-Key": canary})
	reqForward := mk(plainURL, map[string]string{"X-Key": "{{token}}"})
	// Warm every connection first: latency here is per request on a live connection.
	for _, f := range []func() error{
		func() error { return get(direct, reqDirect) }, func() error { return get(endpoint, reqEndpoint) },
		func() error { return get(viaProxy, reqMITM) }, func() error { return get(direct, reqPlainDirect) },
		func() error { return get(viaProxy, reqForward) },
	} {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	var dDirect, dEndpoint, dMITM, dPlain, dForward []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		timed(b, &dDirect, func() error { return get(direct, reqDirect) })
		timed(b, &dEndpoint, func() error { return get(endpoint, reqEndpoint) })
		timed(b, &dMITM, func() error { return get(viaProxy, reqMITM) })
		timed(b, &dPlain, func() error { return get(direct, reqPlainDirect) })
		timed(b, &dForward, func() error { return get(viaProxy, reqForward) })
	}
	b.StopTimer()
	for _, s := range []struct {
		name    string
		d, base []time.Duration
	}{{"proxy", dEndpoint, dDirect}, {"connect", dMITM, dDirect}, {"forward", dForward, dPlain}} {
		benchutil.Report(b, s.name, s.d)
		for _, q := range []struct {
			n string
			q float64
		}{{"p50", 0.5}, {"p99", 0.99}} {
			b.ReportMetric(float64(benchutil.Quantile(s.d, q.q)-benchutil.Quantile(s.base, q.q))/1e6, s.name+"-added-"+q.n+"-ms")
		}
	}
	benchutil.Report(b, "direct-https", dDirect)
	benchutil.Report(b, "direct-http", dPlain)
}

// BenchmarkEgressHandshake: a new connection per request: direct TLS versus CONNECT
// plus a TLS handshake with the run's CA (a cached leaf) in front of the upstream's.
func BenchmarkEgressHandshake(b *testing.B) {
	h := newHarness(b, noRateLimit)
	h.up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	direct := h.directClient(false)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.p.CAPEM())
	viaProxy := h.client()
	viaProxy.Transport.(*http.Transport).DisableKeepAlives = true
	u := h.url("api.test", "/v1/x")
	req := func() *http.Request { r, _ := http.NewRequest("GET", u, nil); return r }
	var dDirect, dMITM []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		timed(b, &dDirect, func() error { return get(direct, req) })
		timed(b, &dMITM, func() error { return get(viaProxy, req) })
	}
	b.StopTimer()
	p50 := benchutil.Report(b, "mitm-new-conn", dMITM)
	d50 := benchutil.Report(b, "direct-new-conn", dDirect)
	b.ReportMetric(float64(p50-d50)/1e6, "mitm-added-p50-ms")
	benchutil.Ratio(b, "mitm/direct-p50", p50, d50)
}

// BenchmarkEgressTunnelThroughput: a 16 MiB download through a tunnel-only CONNECT
// versus directly, alternated; reports MB/s of both over the run, and the median of
// the per-pair ratios (robust to a busy host slowing one side of a single pair).
func BenchmarkEgressTunnelThroughput(b *testing.B) {
	const size = 16 << 20
	h := newHarness(b, noRateLimit)
	chunk := []byte(strings.Repeat("z", 64<<10))
	h.up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for n := 0; n < size; n += len(chunk) {
			w.Write(chunk)
		}
	})
	direct, viaProxy := h.directClient(true), h.client()
	u := h.url("tunnel.test", "/big")
	req := func() *http.Request { r, _ := http.NewRequest("GET", u, nil); return r }
	for _, c := range []*http.Client{direct, viaProxy} { // open both connections first
		if err := get(c, req); err != nil {
			b.Fatal(err)
		}
	}
	var dDirect, dTunnel []time.Duration
	var ratios []float64
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		timed(b, &dDirect, func() error { return get(direct, req) })
		timed(b, &dTunnel, func() error { return get(viaProxy, req) })
		ratios = append(ratios, float64(dDirect[i])/float64(dTunnel[i]))
	}
	b.StopTimer()
	sum := func(d []time.Duration) (t time.Duration) {
		for _, x := range d {
			t += x
		}
		return t
	}
	mbps := func(d []time.Duration) float64 { return float64(size) * float64(len(d)) / sum(d).Seconds() / 1e6 }
	b.ReportMetric(mbps(dDirect), "direct-MB/s")
	b.ReportMetric(mbps(dTunnel), "tunnel-MB/s")
	b.ReportMetric(mbps(dTunnel)/mbps(dDirect), "tunnel/direct")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "tunnel/direct-median")
}
