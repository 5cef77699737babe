package inprocproxy

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkTracingOverhead: one non-streamed completion through a proxy without
// telemetry (the global no-op providers, today's default) and one through a proxy
// with the OTel SDK recording every call (a span per call under a run span, sampled
// and batched to a no-op exporter; the GenAI metrics aggregated by a manual
// reader), per iteration, in alternating order; reports both p50s and their ratio.
// The upstream answers at once (the worst case for a ratio: the proxy is all of the
// call) or after 2 ms (a fast model's answer still dwarfs the proxy).
//
//	go test -run '^$' -bench TracingOverhead -benchtime 3000x ./adapters/inprocproxy/
func BenchmarkTracingOverhead(b *testing.B) {
	b.Run("upstream=instant", func(b *testing.B) { benchTracing(b, 0) })
	b.Run("upstream=2ms", func(b *testing.B) { benchTracing(b, 2*time.Millisecond) })
}

func benchTracing(b *testing.B, delay time.Duration) {
	up := newUpstream(b)
	if delay > 0 {
		up.setRoute(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(delay)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, completionBody)
		})
	}
	plainM, _ := newManager(b)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	tracedM, _ := newManager(b, WithTracerProvider(tp), WithMeterProvider(mp))

	plain := start(b, plainM, testSpec("bench-plain", up.URL))
	runCtx, runSpan := tp.Tracer("bench").Start(context.Background(), "sandbox.run")
	defer runSpan.End()
	tp2, err := tracedM.StartProxy(runCtx, testSpec("bench-traced", up.URL))
	require.NoError(b, err)
	pc, tc := client(plain), client(tp2)
	require.NoError(b, doCall(pc, "http://x/v1/chat/completions", chatRequest))
	require.NoError(b, doCall(tc, "http://x/v1/chat/completions", chatRequest))
	var pd, td []time.Duration
	b.ResetTimer()
	i := 0
	for b.Loop() {
		first, second := pc, tc
		fd, sd := &pd, &td
		if i%2 == 1 {
			first, second, fd, sd = tc, pc, &td, &pd
		}
		i++
		t0 := time.Now()
		if err := doCall(first, "http://x/v1/chat/completions", chatRequest); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := doCall(second, "http://x/v1/chat/completions", chatRequest); err != nil {
			b.Fatal(err)
		}
		*fd, *sd = append(*fd, t1.Sub(t0)), append(*sd, time.Since(t1))
	}
	b.StopTimer()
	p50 := reportQuantiles(b, "untraced", pd)
	t50 := reportQuantiles(b, "traced", td)
	if p50 > 0 {
		b.ReportMetric(t50/p50, "traced/untraced-p50")
	}
}
