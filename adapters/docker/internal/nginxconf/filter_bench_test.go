package nginxconf

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// jsFilterLine matches the configuration's response filter directives.
var jsFilterLine = regexp.MustCompile(`(?m)^\s*js_header_filter [^;]*;\n`)

// BenchmarkNginxResponseFilter: what the njs response filter adds to a call.
// Non-streamed completions (the fake answers with LiteLLM's headers, most of
// which the filter drops) through two nginx proxies of the same configuration,
// one with its js_header_filter lines removed, alternated call by call.
func BenchmarkNginxResponseFilter(b *testing.B) {
	bin := testenv.NeedCommand(b, "nginx", "nginx")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range litellmtest.SharedKeyHeaders {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Litellm-Call-Id", "call-1")
		_, _ = io.WriteString(w, chatBody)
	}))
	defer up.Close()
	spec := port.ProxySpec{RunID: "run-bench", Attempt: 1, Upstream: up.URL, APIKey: "sk-bench",
		Attribution: port.Attribution{BillingAccountID: "acct-1", UserID: "user-1", GraphID: "g", SessionID: "s"}}
	filtered := startNginxEdited(b, bin, spec, NginxConfig{}, nil)
	plain := startNginxEdited(b, bin, spec, NginxConfig{}, func(conf []byte) []byte {
		out := jsFilterLine.ReplaceAll(conf, nil)
		if bytes.Equal(out, conf) {
			b.Fatal("no js_header_filter line to remove")
		}
		return out
	})
	call := func(p *nginxProc) (time.Duration, http.Header) {
		req, _ := http.NewRequest(http.MethodPost, "http://llm/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := p.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(start), resp.Header
	}
	// The filtered proxy forwards the allowlisted header and none of the shared key's.
	if _, h := call(filtered); h.Get("X-Ratelimit-Remaining-Requests") != "" || h.Get("X-Litellm-Call-Id") == "" {
		b.Fatalf("filtered headers: %v", h)
	}
	var f, p []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, _ := call(filtered)
		f = append(f, d)
		d, _ = call(plain)
		p = append(p, d)
	}
	b.StopTimer()
	f50 := benchutil.Report(b, "call-filtered", f)
	p50 := benchutil.Report(b, "call-plain", p)
	benchutil.Ratio(b, "call-filtered/plain-p50-ratio", f50, p50)
	b.ReportMetric(float64(f50-p50)/1e6, "call-filter-added-p50-ms")
	b.ReportMetric(0, "ns/op")
}
