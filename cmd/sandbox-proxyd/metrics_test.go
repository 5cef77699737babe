package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/telemetry"
)

// The metrics listener is loopback TCP or a unix socket outside the run sockets.
func TestMetricsListener(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{"0.0.0.0:0", "10.0.0.1:9090", ":9090", "localhost", "unix:rel.sock", "unix:" + filepath.Join(dir, "runs", "m.sock")} {
		if ln, err := metricsListener(bad, filepath.Join(dir, "runs")); err == nil {
			ln.Close()
			t.Errorf("%q accepted", bad)
		}
	}
	for _, good := range []string{"127.0.0.1:0", "unix:" + filepath.Join(dir, "metrics.sock")} {
		ln, err := metricsListener(good, filepath.Join(dir, "runs"))
		if err != nil {
			t.Errorf("%q: %v", good, err)
			continue
		}
		ln.Close()
	}
}

// The endpoint serves the library's metrics in Prometheus names, and the runs gauge.
func TestMetricsEndpoint(t *testing.T) {
	mp, reg, err := metricsProvider(func() int { return 7 })
	if err != nil {
		t.Fatal(err)
	}
	defer shutdownMetrics(mp)
	telemetry.New(nil, mp).LLMCall(t.Context(), telemetry.OutcomeRefused, "budget_exceeded")
	ln, err := metricsListener("127.0.0.1:0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serveMetrics(ln, reg)
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"sandbox_proxyd_runs 7", `sandbox_llm_calls_total{sandbox_outcome="refused"} 1`, `sandbox_llm_refusals_total{sandbox_refusal_rule="budget_exceeded"} 1`, "go_goroutines"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("no %q in:\n%s", want, b)
		}
	}
}
