package containerd

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkPooledRun alternates, in one loop, a pooled run (argv → exit in a fresh
// pre-created sandbox, with the run's in-process LLM proxy already listening) and the
// raw containerd client's cold create → exit with the same lockdown (rawRun). The
// pool is full before each pooled sample, and its refill finishes before the next
// sample of either side. Goal: pooled p50 <= 20 ms.
func BenchmarkPooledRun(b *testing.B) { benchPooledRun(b) }

// BenchmarkPooledRunCreated is BenchmarkPooledRun with the stubs started only at the
// claim (WithPoolStarted(false)): the task is created, not started, until then.
func BenchmarkPooledRunCreated(b *testing.B) { benchPooledRun(b, WithPoolStarted(false)) }

func benchPooledRun(b *testing.B, opts ...Option) {
	base, err := os.MkdirTemp("", "bench-pool-proxy")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	pm, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(testenv.Owner("bench")))
	if err != nil {
		b.Fatal(err)
	}
	defer pm.Shutdown(context.Background())
	var (
		phase   = map[string][]time.Duration{}
		last    time.Time
		pooling bool
	)
	hook := func(p string) {
		if pooling {
			now := time.Now()
			phase[p] = append(phase[p], now.Sub(last))
			last = now
		}
	}
	r, image := poolEnv(b, "bench", append(opts, func(c *config) error { c.phaseHook = hook; return nil })...)
	ctx := context.Background()
	tmpl := suiteSpec(image)
	tmpl.LLM = &port.LLMSocket{HostDir: "/"}
	p, err := r.NewPool(ctx, port.TemplateOf(tmpl), port.PoolOptions{Size: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	// toAgent: RunOnce called → the agent runs (its own clock reading); fromAgent: the
	// agent runs → RunOnce returned (its exit, the bridge's, the shim's report).
	var pooled, withProxy, raw, toAgent, fromAgent []time.Duration
	for b.Loop() {
		_, res, _, err := rawRun(ctx, r, port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: image, Argv: []string{"/agent", "exit", "0"}})
		if err != nil {
			b.Fatalf("raw: %v", err)
		}
		raw = append(raw, res)
		if err := r.Drain(ctx); err != nil {
			b.Fatal(err)
		}
		waitReady(b, p)

		t0 := time.Now()
		spec := tmpl
		spec.RunID = sandboxtest.RunID("bench")
		spec.Argv = []string{"/agent", "now"}
		px, err := pm.Start(ctx, port.ProxySpec{RunID: spec.RunID, Upstream: "http://127.0.0.1:9", APIKey: "k", Attribution: port.Attribution{BillingAccountID: "a"}})
		if err != nil {
			b.Fatal(err)
		}
		sock := px.Socket()
		spec.LLM = &sock
		t1 := time.Now()
		last, pooling = t1, true
		out, err := p.RunOnce(ctx, spec)
		pooling = false
		if err != nil || out.ExitCode != 0 {
			b.Fatalf("pooled: %v %+v", err, out)
		}
		end := time.Now()
		pooled = append(pooled, end.Sub(t1))
		withProxy = append(withProxy, end.Sub(t0))
		if ns, err := strconv.ParseInt(strings.TrimSpace(string(out.Stdout)), 10, 64); err == nil {
			agent := time.Unix(0, ns)
			toAgent = append(toAgent, agent.Sub(t1))
			fromAgent = append(fromAgent, end.Sub(agent))
		} else {
			b.Fatalf("the agent printed no time: %q", out.Stdout)
		}
		_, _ = px.Stop(ctx)
		if err := r.Drain(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if st := p.Stats(); st.Cold > 0 {
		b.Fatalf("a sample ran cold: %+v", st)
	}
	p50 := benchutil.Report(b, "pooled", pooled)
	benchutil.Report(b, "pooled+proxystart", withProxy)
	r50 := benchutil.Report(b, "rawcold", raw)
	benchutil.Ratio(b, "pooled/rawcold-p50-ratio", p50, r50)
	b.ReportMetric(float64(benchutil.Quantile(toAgent, 0.5))/1e6, "pooled-to-agent-ms")
	b.ReportMetric(float64(benchutil.Quantile(fromAgent, 0.5))/1e6, "pooled-agent-to-result-ms")
	for _, ph := range []string{"attach", "claim", "start", "exit", "output"} {
		b.ReportMetric(float64(benchutil.Quantile(phase[ph], 0.5))/1e6, "pooled-"+ph+"-ms")
	}
	b.ReportMetric(0, "ns/op")
}
