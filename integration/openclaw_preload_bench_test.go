package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/preload"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkOpenClawPreloaded measures pre-booted OpenClaw one-shots (Docker): the
// same prompt, in turn (the order rotating each iteration), by the host CLI against
// the fake LiteLLM directly, by a cold sandboxed one-shot through the facade, and by
// a one-shot served by a pre-booted slot of a warm pool through the facade (the
// OpenClaw preloader imported the CLI's entry before the claim). Both sandboxed
// variants have the warm compile cache (openclaw.CompileCache, built first by a
// sandboxed one-shot) mounted read-only; the host CLI has its own, persistent one.
// Before each iteration the pool is full again, so no slot's boot competes with a
// measured run. Reported per variant: wall time p50/p95, boot overhead (wall minus
// OpenClaw's own reported turn) p50, and for the pre-booted slots their memory when
// claimed (the idle slot: RunResult.Memory.ClaimBytes) and the run's peak.
func BenchmarkOpenClawPreloaded(b *testing.B) {
	appDir, nodeBin := openClawInstall(b)
	launcher := os.Getenv("OPENCLAW_BIN")
	testenv.Need(b, "openclaw", launcher != "", "OPENCLAW_BIN is not set")
	ctx := context.Background()
	fake := litellmtest.NewServer(litellmtest.WithReply(markerReply), litellmtest.WithMasterKey(openclaw.PlaceholderAPIKey))
	defer fake.Close()
	runner, image := dockerRunnerFor(b, testenv.Bridge(b), func(ctx context.Context) (string, []byte, error) {
		return testimages.NodeArchive(ctx, nodeBin)
	})

	// The compile cache first, by a cold sandboxed one-shot.
	plain, lc := newStack(b, runner, fake)
	catalog, err := lc.Models(ctx)
	if err != nil {
		b.Fatal(err)
	}
	models, err := openclaw.ModelsFromLiteLLM(catalog)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := openclaw.NewConfig(openclaw.WithModels(models...), openclaw.WithDefaultModel("gpt-4o-mini"), openclaw.WithAgentTimeout(150*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	cold := &openClawStack{sb: plain, image: image, appDir: appDir, cfg: cfg}
	cache, _ := buildCompileCache(ctx, b, cold)
	cacheMount, _ := cache.Mount()
	cold.mounts = []port.Mount{cacheMount}

	dir := b.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, preload.OpenClawName), preload.OpenClaw, 0o644); err != nil {
		b.Fatal(err)
	}
	pre := &port.Preload{
		Argv:   []string{testimages.NodeBinary, "/opt/preload/" + preload.OpenClawName, testimages.AppDir + "/node_modules/openclaw"},
		Mounts: []port.Mount{{Source: dir, Target: "/opt/preload"}, {Source: appDir, Target: testimages.AppDir}, cacheMount},
	}
	limits := port.Limits{Timeout: 8 * time.Minute, MemoryBytes: 1 << 30}
	tmpl := port.TemplateOf(port.RunSpec{Image: image, WorkspaceDir: "/", LLM: &port.LLMSocket{HostDir: "/"}, Limits: limits, Preload: pre})
	pool, err := runner.(port.Pooler).WarmPool(ctx, tmpl, port.PoolOptions{Size: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close(context.Background())
	pooled, _ := newStack(b, runner, fake, sandbox.WithPool(pool))
	waitPool := func() {
		for deadline := time.Now().Add(5 * time.Minute); pool.Stats().Ready < 1; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) || pool.Stats().PreloadFailed > 0 {
				b.Fatalf("the pre-booted slot never became ready: %+v", pool.Stats())
			}
		}
	}

	type sample struct{ wall, turn time.Duration }
	var host, boxed, preb []sample
	var claimMem, peakMem []time.Duration // bytes, in Durations for benchutil's quantiles
	check := func(what, marker string, out *openclaw.Result, err error, stderr []byte) {
		if err != nil || out == nil || out.Text() != "ANSWER-"+marker {
			b.Fatalf("%s: %v %v\n%s", what, err, out, tail(stderr))
		}
	}
	variants := []func(i int, marker, prompt string){
		func(_ int, marker, prompt string) {
			start := time.Now()
			out := hostOneShotResult(ctx, b, launcher, fake.URL, prompt)
			wall := time.Since(start)
			check("host", marker, out, nil, nil)
			host = append(host, sample{wall, out.Meta.Duration()})
		},
		func(_ int, marker, prompt string) {
			start := time.Now()
			_, res, runErr := cold.run(ctx, b, sandboxtest.RunID("pre-bench-cold"), port.Attribution{BillingAccountID: "acct-bench"}, openclaw.Files{}, prompt, false)
			wall := time.Since(start)
			out, err := openclaw.ParseRun(res.Run, runErr)
			check("cold", marker, out, err, res.Run.Stderr)
			boxed = append(boxed, sample{wall, out.Meta.Duration()})
		},
		func(_ int, marker, prompt string) {
			runID := sandboxtest.RunID("pre-bench")
			one := openclaw.OneShot{SessionID: runID, Timeout: 150 * time.Second, Command: []string{testimages.NodeBinary, testimages.AppDir + "/node_modules/openclaw/openclaw.mjs"}}
			ws := newWorkspace(b)
			if err := one.Prepare(ws, cfg, openclaw.Files{}, prompt); err != nil {
				b.Fatal(err)
			}
			spec := port.RunSpec{Limits: limits}
			if err := one.Apply(&spec); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			res, runErr := pooled.Run(ctx, sandbox.Request{
				Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: image,
				Argv: spec.Argv, Env: spec.Env, WorkspaceDir: ws, Limits: spec.Limits, Preload: pre,
				Attribution: port.Attribution{BillingAccountID: "acct-bench"},
			})
			wall := time.Since(start)
			if res == nil || res.Run == nil {
				b.Fatalf("pre-booted: %v", runErr)
			}
			out, err := openclaw.ParseRun(res.Run, runErr)
			check("pre-booted", marker, out, err, res.Run.Stderr)
			if res.Run.Start != port.StartPreloaded {
				b.Fatalf("not served pre-booted: %q %s", res.Run.Start, res.Run.StartNote)
			}
			preb = append(preb, sample{wall, out.Meta.Duration()})
			if m := res.Run.Memory; m != nil {
				claimMem = append(claimMem, time.Duration(m.ClaimBytes))
				peakMem = append(peakMem, time.Duration(m.PeakBytes))
			}
		},
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		waitPool()
		b.StartTimer()
		marker := fmt.Sprintf("RUN%c", 'A'+i%26)
		for k := range variants {
			variants[(i+k)%len(variants)](i, marker, "Reply with the code word. MARKER="+marker)
		}
	}
	b.StopTimer()
	report := func(name string, s []sample) (wall, over time.Duration) {
		var walls, overs []time.Duration
		for _, x := range s {
			walls = append(walls, x.wall)
			overs = append(overs, x.wall-x.turn)
		}
		wall = benchutil.Report(b, name, walls)
		over = benchutil.Quantile(overs, 0.5)
		b.ReportMetric(float64(over)/float64(time.Millisecond), name+"-boot-overhead-p50-ms")
		return wall, over
	}
	h, _ := report("host", host)
	c, _ := report("cold", boxed)
	p, _ := report("preboot", preb)
	benchutil.Ratio(b, "preboot/host-p50", p, h)
	benchutil.Ratio(b, "preboot/cold-p50", p, c)
	if len(claimMem) > 0 {
		b.ReportMetric(float64(benchutil.Quantile(claimMem, 0.5))/(1<<20), "preboot-idle-slot-MiB")
		b.ReportMetric(float64(benchutil.Quantile(peakMem, 0.5))/(1<<20), "preboot-run-peak-MiB")
	}
}
