package integration

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/sandboxgw"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkOpenClawPreloaded measures pre-booted OpenClaw one-shots (Docker): the
// same prompt, in turn (the order rotating each iteration), by the host CLI against
// the fake LiteLLM directly, by a cold sandboxed one-shot through the facade, by a
// one-shot served by a pre-booted slot of a warm pool through the facade (the OpenClaw
// preloader imported the CLI's entry and main graph before the claim), by one served
// by a slot whose preloader also ran its warm-up turn (--warm-up), by one whose
// warm-up started no standby workers (--warm-up --no-standby-workers), by one whose
// claim started no spare SQLite child (--warm-up --no-spare-sqlite-child), by one whose
// warm-up also started standbys of the session archive's workers (--warm-up
// --standby-archive-workers), by one whose warm-up and run left plugins to OpenClaw's
// defaults (--warm-up-default-plugins, an empty plugins object: the config before
// openclaw.WithPlugins turned them off), and by one turn
// through a warm sandboxed gateway (BenchmarkOpenClawSandboxedGateway's set-up; its
// first turn is not counted). All sandboxed one-shots have the warm compile cache
// (openclaw.CompileCache, built first by a sandboxed one-shot) mounted read-only; the
// host CLI has its own, persistent one. Before each iteration, and after each
// pre-booted run, every pool is full again, so no slot's boot competes with a
// measured run. Reported per variant: wall
// time p50/p95, boot overhead (wall minus OpenClaw's own reported turn) p50, and for
// the pre-booted slots their memory when claimed (the idle slot:
// RunResult.Memory.ClaimBytes) and the run's peak.
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
	cfg := openClawConfig(ctx, b, lc)
	// The preboot-warm-default-plugins arm's runs: plugins left to OpenClaw's defaults
	// (an empty plugins object), as every config was before openclaw.WithPlugins.
	defaultPluginsCfg := openClawConfig(ctx, b, lc, openclaw.WithSetting("plugins", map[string]any{}))
	cold := &openClawStack{sb: plain, image: image, appDir: appDir, cfg: cfg}
	cache, _ := buildCompileCache(ctx, b, cold)
	cacheMount, _ := cache.Mount()
	cold.mounts = []port.Mount{cacheMount}

	limits := port.Limits{Timeout: 8 * time.Minute, MemoryBytes: 1 << 30}
	type prebooted struct {
		name   string
		pre    *port.Preload
		limits port.Limits
		pool   port.Pool
		sb     *sandbox.Sandbox
	}
	var pools []*prebooted
	for _, name := range []string{"preboot", "preboot-warm", "preboot-warm-no-standby", "preboot-warm-no-spare", "preboot-warm-archive-standbys", "preboot-warm-default-plugins"} {
		warmUp := name != "preboot"
		p := &prebooted{name: name, pre: openClawPreload(b, appDir, warmUp, cacheMount), limits: limits}
		if warmUp {
			// A warm-up slot's refill was seen OOM-killed at 1 GiB on a loaded machine
			// (its collector starved of CPU): the benchmark measures speed, not the limit.
			p.limits.MemoryBytes = 3 << 29
		}
		if flag := map[string]string{"preboot-warm-no-standby": "--no-standby-workers", "preboot-warm-no-spare": "--no-spare-sqlite-child", "preboot-warm-archive-standbys": "--standby-archive-workers", "preboot-warm-default-plugins": "--warm-up-default-plugins"}[name]; flag != "" {
			n := len(p.pre.Argv)
			p.pre.Argv = append(p.pre.Argv[:n-1:n-1], flag, p.pre.Argv[n-1])
		}
		tmpl := port.TemplateOf(port.RunSpec{Image: image, WorkspaceDir: "/", LLM: &port.LLMSocket{HostDir: "/"}, Limits: p.limits, Preload: p.pre})
		var err error
		if p.pool, err = runner.(port.Pooler).WarmPool(ctx, tmpl, port.PoolOptions{Size: 1, RefillBetweenRuns: true}); err != nil {
			b.Fatal(err)
		}
		defer p.pool.Close(context.Background())
		p.sb, _ = newStack(b, runner, fake, sandbox.WithPool(p.pool))
		pools = append(pools, p)
	}
	waitPools := func() {
		for _, p := range pools {
			for deadline := time.Now().Add(8 * time.Minute); p.pool.Stats().Ready < 1; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) || p.pool.Stats().PreloadFailed > 0 {
					b.Fatalf("the %s slot never became ready: %+v", p.name, p.pool.Stats())
				}
			}
		}
	}

	// The warm sandboxed gateway, its first turn not counted.
	gws := newGWBench(b, dockerSessionRunner)
	gw, err := sandboxgw.Start(ctx, gws.opts)
	if err != nil {
		b.Fatal(err)
	}
	defer gw.Close(context.Background())
	gws.benchTurn(ctx, b, gw, "WARM")

	type sample struct{ wall, turn time.Duration }
	samples := map[string][]sample{}
	claimMem, peakMem := map[string][]time.Duration{}, map[string][]time.Duration{} // bytes, in Durations for benchutil's quantiles
	check := func(what, marker string, out *openclaw.Result, err error, stderr []byte) {
		if err != nil || out == nil || out.Text() != "ANSWER-"+marker {
			b.Fatalf("%s: %v %v\n%s", what, err, out, tail(stderr))
		}
	}
	variants := []func(marker, prompt string){
		func(marker, prompt string) {
			start := time.Now()
			out := hostOneShotResult(ctx, b, launcher, fake.URL, prompt)
			wall := time.Since(start)
			check("host", marker, out, nil, nil)
			samples["host"] = append(samples["host"], sample{wall, out.Meta.Duration()})
		},
		func(marker, prompt string) {
			start := time.Now()
			_, res, runErr := cold.run(ctx, b, sandboxtest.RunID("pre-bench-cold"), port.Attribution{BillingAccountID: "acct-bench"}, openclaw.Files{}, prompt, false)
			wall := time.Since(start)
			out, err := openclaw.ParseRun(res.Run, runErr)
			check("cold", marker, out, err, res.Run.Stderr)
			samples["cold"] = append(samples["cold"], sample{wall, out.Meta.Duration()})
		},
		func(marker, _ string) {
			start := time.Now()
			gws.benchTurn(ctx, b, gw, marker)
			samples["gateway"] = append(samples["gateway"], sample{wall: time.Since(start)})
		},
	}
	for _, p := range pools {
		variants = append(variants, func(marker, prompt string) {
			runID := sandboxtest.RunID("pre-bench")
			one := openclaw.OneShot{SessionID: runID, Timeout: 150 * time.Second, Command: []string{testimages.NodeBinary, testimages.AppDir + "/node_modules/openclaw/openclaw.mjs"}}
			ws := newWorkspace(b)
			c := cfg
			if p.name == "preboot-warm-default-plugins" {
				c = defaultPluginsCfg
			}
			if err := one.Prepare(ws, c, openclaw.Files{}, prompt); err != nil {
				b.Fatal(err)
			}
			spec := port.RunSpec{Limits: p.limits}
			if err := one.Apply(&spec); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			res, runErr := p.sb.Run(ctx, sandbox.Request{
				Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: image,
				Argv: spec.Argv, Env: spec.Env, WorkspaceDir: ws, Limits: spec.Limits, Preload: p.pre,
				Attribution: port.Attribution{BillingAccountID: "acct-bench"},
			})
			wall := time.Since(start)
			if res == nil || res.Run == nil {
				b.Fatalf("%s: %v", p.name, runErr)
			}
			out, err := openclaw.ParseRun(res.Run, runErr)
			check(p.name, marker, out, err, res.Run.Stderr)
			if res.Run.Start != port.StartPreloaded {
				b.Fatalf("%s: not served pre-booted: %q %s", p.name, res.Run.Start, res.Run.StartNote)
			}
			samples[p.name] = append(samples[p.name], sample{wall, out.Meta.Duration()})
			if m := res.Run.Memory; m != nil {
				claimMem[p.name] = append(claimMem[p.name], time.Duration(m.ClaimBytes))
				peakMem[p.name] = append(peakMem[p.name], time.Duration(m.PeakBytes))
			}
			// The pool boots the next slot now (a warm-up turn is several CPU-seconds):
			// let it finish before the next variant is timed.
			waitPools()
		})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		waitPools()
		b.StartTimer()
		marker := fmt.Sprintf("RUN%c", 'A'+i%26)
		for k := range variants {
			variants[(i+k)%len(variants)](marker, "Reply with the code word only. MARKER="+marker)
		}
	}
	b.StopTimer()
	p50 := map[string]time.Duration{}
	for _, name := range []string{"host", "cold", "gateway", "preboot", "preboot-warm", "preboot-warm-no-standby", "preboot-warm-no-spare", "preboot-warm-archive-standbys", "preboot-warm-default-plugins"} {
		var walls, overs []time.Duration
		for _, x := range samples[name] {
			walls = append(walls, x.wall)
			overs = append(overs, x.wall-x.turn)
		}
		p50[name] = benchutil.Report(b, name, walls)
		if name != "gateway" { // a gateway turn reports no turn time of its own
			b.ReportMetric(float64(benchutil.Quantile(overs, 0.5))/float64(time.Millisecond), name+"-boot-overhead-p50-ms")
		}
	}
	benchutil.Ratio(b, "preboot-warm-no-standby/preboot-warm-p50", p50["preboot-warm-no-standby"], p50["preboot-warm"])
	benchutil.Ratio(b, "preboot-warm-no-spare/preboot-warm-p50", p50["preboot-warm-no-spare"], p50["preboot-warm"])
	benchutil.Ratio(b, "preboot-warm-archive-standbys/preboot-warm-p50", p50["preboot-warm-archive-standbys"], p50["preboot-warm"])
	benchutil.Ratio(b, "preboot-warm/preboot-warm-default-plugins-p50", p50["preboot-warm"], p50["preboot-warm-default-plugins"])
	for _, name := range []string{"preboot", "preboot-warm", "preboot-warm-no-standby", "preboot-warm-no-spare", "preboot-warm-archive-standbys", "preboot-warm-default-plugins"} {
		benchutil.Ratio(b, name+"/host-p50", p50[name], p50["host"])
		benchutil.Ratio(b, name+"/cold-p50", p50[name], p50["cold"])
		benchutil.Ratio(b, name+"/gateway-p50", p50[name], p50["gateway"])
		if len(claimMem[name]) > 0 {
			b.ReportMetric(float64(benchutil.Quantile(claimMem[name], 0.5))/(1<<20), name+"-idle-slot-MiB")
			b.ReportMetric(float64(benchutil.Quantile(peakMem[name], 0.5))/(1<<20), name+"-run-peak-MiB")
		}
	}
}
