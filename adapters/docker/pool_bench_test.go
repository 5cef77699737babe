package docker

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

// BenchmarkPooledRun alternates, in one loop, a pooled run (argv → exit in a started,
// pre-created Docker sandbox, with the run's in-process LLM proxy already listening
// and its socket directory attached at claim) and the raw Docker API's cold create →
// exit with the same lockdown (rawRun). The pool is full before each pooled sample
// and background removals are done before the next sample of either side. Goal:
// pooled p50 <= 0.2x rawcold p50.
func BenchmarkPooledRun(b *testing.B) {
	base, err := os.MkdirTemp("", "bench-pool-proxy")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	pm, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer pm.Shutdown(context.Background())
	r, cli, image := poolEnv(b, testenv.Owner("bench-pool"))
	ctx := context.Background()
	tmpl := suiteSpec(image)
	tmpl.LLM = &port.LLMSocket{HostDir: "/"}
	p, err := r.NewPool(ctx, port.TemplateOf(tmpl), port.PoolOptions{Size: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	var pooled, raw, toAgent, fromAgent []time.Duration
	for b.Loop() {
		res, _, err := rawRun(ctx, cli, port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: image, Argv: []string{"/agent", "exit", "0"}}, "")
		if err != nil {
			b.Fatalf("raw: %v", err)
		}
		raw = append(raw, res)
		if err := r.Drain(ctx); err != nil {
			b.Fatal(err)
		}
		waitReady(b, p)

		spec := tmpl
		spec.RunID = sandboxtest.RunID("bench")
		spec.Argv = []string{"/agent", "now"}
		px, err := pm.Start(ctx, port.ProxySpec{RunID: spec.RunID, Upstream: "http://127.0.0.1:9", APIKey: "k", Attribution: port.Attribution{BillingAccountID: "a"}})
		if err != nil {
			b.Fatal(err)
		}
		sock := px.Socket()
		spec.LLM = &sock
		t0 := time.Now()
		out, err := p.RunOnce(ctx, spec)
		if err != nil || out.ExitCode != 0 {
			b.Fatalf("pooled: %v %+v", err, out)
		}
		end := time.Now()
		pooled = append(pooled, end.Sub(t0))
		ns, err := strconv.ParseInt(strings.TrimSpace(string(out.Stdout)), 10, 64)
		if err != nil {
			b.Fatalf("the agent printed no time: %q", out.Stdout)
		}
		toAgent = append(toAgent, time.Unix(0, ns).Sub(t0))
		fromAgent = append(fromAgent, end.Sub(time.Unix(0, ns)))
		_, _ = px.Stop(ctx)
		if err := r.Drain(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if st := p.Stats(); st.Cold > 0 {
		b.Fatalf("a sample ran cold: %+v", st)
	}
	p50 := benchutil.Report(b, "pooled", pooled)
	r50 := benchutil.Report(b, "rawcold", raw)
	benchutil.Ratio(b, "pooled/rawcold-p50-ratio", p50, r50)
	// toAgent: RunOnce called → the agent runs (its own clock reading); fromAgent: the
	// agent runs → RunOnce returned (its exit, the bridge's, the daemon's report).
	b.ReportMetric(float64(benchutil.Quantile(toAgent, 0.5))/1e6, "pooled-to-agent-ms")
	b.ReportMetric(float64(benchutil.Quantile(fromAgent, 0.5))/1e6, "pooled-agent-to-result-ms")
	b.ReportMetric(0, "ns/op")
}
