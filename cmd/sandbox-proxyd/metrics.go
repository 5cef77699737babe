package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// The metrics endpoint is opt-in (-metrics-listen) and separate from every socket
// a sandbox can reach: a unix socket outside the run socket directory, or a
// loopback TCP address. It serves the library's OpenTelemetry metrics (the GenAI
// client metrics, calls by outcome, refusals by rule) through the OpenTelemetry
// Prometheus exporter, plus the daemon's registered runs and the Go runtime's
// collectors, in the Prometheus text format at /metrics.

// metricsListener parses -metrics-listen: "unix:/path" or a loopback "host:port".
func metricsListener(spec, socketDir string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(spec, "unix:"); ok {
		if !filepath.IsAbs(path) {
			return nil, fmt.Errorf("metrics socket %q is not absolute", path)
		}
		rel, err := filepath.Rel(filepath.Clean(socketDir), filepath.Clean(path))
		if err == nil && !strings.HasPrefix(rel, "..") {
			return nil, fmt.Errorf("metrics socket %q is inside the run socket directory %s, which sandboxes mount", path, socketDir)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, err
		}
		// Metrics name no secret, but runs' activity is the operator's business.
		if err := os.Chmod(path, 0o660); err != nil {
			ln.Close()
			return nil, err
		}
		return ln, nil
	}
	host, _, err := net.SplitHostPort(spec)
	if err != nil {
		return nil, fmt.Errorf("metrics address %q is neither unix:/path nor host:port", spec)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("metrics address %q is not a loopback address (use a unix socket or 127.0.0.1:port)", spec)
	}
	return net.Listen("tcp", spec)
}

// metricsProvider is the daemon's meter provider, exporting to a Prometheus
// registry that also reports the daemon's registered runs (runs, read at scrape).
func metricsProvider(runs func() int) (*sdkmetric.MeterProvider, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, nil, err
	}
	reg.MustRegister(
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sandbox_proxyd_runs", Help: "Runs registered with the daemon (alive or restored, not yet deregistered or expired).",
		}, func() float64 { return float64(runs()) }),
	)
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), reg, nil
}

// serveMetrics serves reg on ln until it is closed.
func serveMetrics(ln net.Listener, reg *prometheus.Registry) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	err := srv.Serve(ln)
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// shutdownMetrics flushes nothing (Prometheus pulls) but releases the provider.
func shutdownMetrics(mp *sdkmetric.MeterProvider) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = mp.Shutdown(ctx)
}
