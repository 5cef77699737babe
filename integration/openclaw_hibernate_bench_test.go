package integration

import (
	"context"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkOpenClawHibernate measures an OpenClaw conversation kept in hibernation
// (Docker, the real OpenClaw 2026.9.6, the warm compile cache mounted), alternating
// in one loop (the order rotating each iteration):
//
//   - preboot: a fresh one-shot served by a pre-booted slot (the preloader's warm-up
//     turn run before the claim): the baseline;
//   - resumed: the conversation's follow-up from its hibernation, served by a slot of
//     the same pool: the saved state restored into a fresh workspace, the turn's
//     inputs written over it, the run (answered from the first turn's content);
//   - resumed-follow-up: the same from a pool whose slots' warm-up also ran a
//     follow-up turn on its own state (--warm-up-follow-up);
//   - preboot-follow-up: preboot on that pool;
//   - resumed-follow-up-archive: resumed-follow-up from a pool whose slots also have
//     standbys of the session archive's workers (--standby-archive-workers);
//   - hibernate: an idle session holding the conversation's OpenClaw state (resumed
//     from the hibernation, untimed) hibernated: stopped, removed, its state saved.
//
// The pool is full before each pooled sample. Reported: wall p50/p95 of each, the
// boot overhead (wall minus OpenClaw's reported turn) of the runs, the idle slots'
// memory, and the resumed runs over preboot. Goals: hibernate <= 2 s, resumed <= 1.3x preboot.
func BenchmarkOpenClawHibernate(b *testing.B) {
	ctx := context.Background()
	fake := litellmtest.NewServer(litellmtest.WithReply(conversationReply))
	defer fake.Close()
	runner, image, appDir := openClawRunner(b, dockerRunnerFor)

	// The compile cache first, by a cold sandboxed one-shot.
	plain, lc := newStack(b, runner, fake)
	cfg := openClawConfig(ctx, b, lc)
	cache, _ := buildCompileCache(ctx, b, &openClawStack{sb: plain, image: image, appDir: appDir, cfg: cfg})
	cacheMount, _ := cache.Mount()
	c := newOpenClawConversation(b, runner, image, appDir, fake, true, cacheMount)
	// A second pool whose slots' warm-up also ran a follow-up turn on its own state.
	f := newOpenClawConversationWith(b, runner, image, appDir, fake, "--warm-up-follow-up", cacheMount)
	f.one, f.spec = c.one, c.spec
	// A third, whose slots also keep standbys of the session archive's workers.
	g := newOpenClawConversationWith(b, runner, image, appDir, fake, "--warm-up-follow-up --standby-archive-workers", cacheMount)
	g.one, g.spec = c.one, c.spec

	// The conversation's first turn, in a session, then hibernated.
	sess, _ := c.startSession(ctx, b, "Remember: the code word is "+conversationWord+". Reply NOTED.")
	if got := c.turn(ctx, b, sess).Text(); got != "NOTED" {
		b.Fatalf("first turn answered %q", got)
	}
	h, _, err := sess.Hibernate(ctx, sandbox.HibernateOptions{Store: c.store, Exclude: openclaw.HibernateExclude, Grace: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}

	type sample struct{ wall, turn time.Duration }
	samples := map[string][]sample{}
	var hibernate []time.Duration
	claimMem := map[string][]time.Duration{}
	pooled := func(name string, run func() (*sandbox.Result, *openclaw.Result, error), want string) {
		c.waitReady(b)
		f.waitReady(b)
		g.waitReady(b)
		start := time.Now()
		res, out, err := run()
		wall := time.Since(start)
		if err != nil || out == nil || out.Text() != want {
			b.Fatalf("%s: %v %v", name, err, out)
		}
		if res.Run.Start != port.StartPreloaded {
			b.Fatalf("%s: not served pre-booted: %q %s", name, res.Run.Start, res.Run.StartNote)
		}
		samples[name] = append(samples[name], sample{wall, out.Meta.Duration()})
		if m := res.Run.Memory; m != nil && m.ClaimBytes > 0 {
			claimMem[name] = append(claimMem[name], time.Duration(m.ClaimBytes))
		}
	}
	// A fresh one-shot on conversation x's pool.
	fresh := func(name string, x *openClawConversation) func() {
		return func() {
			pooled(name, func() (*sandbox.Result, *openclaw.Result, error) {
				runID := sandboxtest.RunID("hib-bench-fresh")
				one := x.one
				one.SessionID = runID
				ws := newWorkspace(b)
				if err := one.Prepare(ws, x.cfg, openclaw.Files{Agents: "You are a test agent."}, "What was the code word? Answer with it."); err != nil {
					b.Fatal(err)
				}
				spec := port.RunSpec{Limits: x.limits}
				if err := one.Apply(&spec); err != nil {
					b.Fatal(err)
				}
				res, runErr := x.sb.Run(ctx, sandbox.Request{
					Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: x.image,
					Argv: spec.Argv, Env: spec.Env, WorkspaceDir: ws, Limits: x.limits, Preload: x.pre,
					Attribution: port.Attribution{BillingAccountID: "acct-bench"},
				})
				if res == nil || res.Run == nil {
					return res, nil, runErr
				}
				out, err := openclaw.ParseRun(res.Run, runErr)
				return res, out, err
			}, "NO-MEMORY")
		}
	}
	variants := []func(){
		fresh("preboot", c),
		fresh("preboot-follow-up", f),
		func() {
			pooled("resumed", func() (*sandbox.Result, *openclaw.Result, error) {
				return c.resumeTurn(ctx, b, h, sandboxtest.RunID("hib-bench-resumed"), "What was the code word? Answer with it.")
			}, "ANSWER-"+conversationWord)
		},
		func() {
			pooled("resumed-follow-up", func() (*sandbox.Result, *openclaw.Result, error) {
				return f.resumeTurn(ctx, b, h, sandboxtest.RunID("hib-bench-resumed-fu"), "What was the code word? Answer with it.")
			}, "ANSWER-"+conversationWord)
		},
		func() {
			pooled("resumed-follow-up-archive", func() (*sandbox.Result, *openclaw.Result, error) {
				return g.resumeTurn(ctx, b, h, sandboxtest.RunID("hib-bench-resumed-fa"), "What was the code word? Answer with it.")
			}, "ANSWER-"+conversationWord)
		},
		func() {
			idle, err := c.sb.Resume(ctx, h, sandbox.SessionRequest{Request: sandbox.Request{
				Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("hib-bench-idle"), Image: c.image,
				Argv: []string{testimages.NodeBinary, "-e", "setInterval(() => {}, 1 << 30)"}, Env: c.spec.Env,
				WorkspaceDir: newWorkspace(b), Mounts: append([]port.Mount{{Source: c.appDir, Target: testimages.AppDir}}, c.mounts...),
				Attribution: port.Attribution{BillingAccountID: "acct-bench"},
				Limits:      port.Limits{Timeout: 15 * time.Minute, MemoryBytes: 1 << 30},
			}})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			h2, _, err := idle.Hibernate(ctx, sandbox.HibernateOptions{Store: c.store, Exclude: openclaw.HibernateExclude, Grace: 5 * time.Second})
			hibernate = append(hibernate, time.Since(start))
			if err != nil || h2.Saved.Files == 0 {
				b.Fatalf("hibernate: %v %+v", err, h2)
			}
			_ = h2.Remove()
		},
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range variants {
			variants[(i+k)%len(variants)]()
		}
	}
	b.StopTimer()
	p50 := map[string]time.Duration{}
	for _, name := range []string{"preboot", "preboot-follow-up", "resumed", "resumed-follow-up", "resumed-follow-up-archive"} {
		var walls, overs []time.Duration
		for _, x := range samples[name] {
			walls = append(walls, x.wall)
			overs = append(overs, x.wall-x.turn)
		}
		p50[name] = benchutil.Report(b, name, walls)
		b.ReportMetric(float64(benchutil.Quantile(overs, 0.5))/float64(time.Millisecond), name+"-boot-overhead-p50-ms")
	}
	benchutil.Report(b, "hibernate", hibernate)
	benchutil.Ratio(b, "resumed/preboot-p50", p50["resumed"], p50["preboot"])
	benchutil.Ratio(b, "resumed-follow-up/preboot-p50", p50["resumed-follow-up"], p50["preboot"])
	benchutil.Ratio(b, "preboot-follow-up/preboot-p50", p50["preboot-follow-up"], p50["preboot"])
	benchutil.Ratio(b, "resumed-follow-up/preboot-follow-up-p50", p50["resumed-follow-up"], p50["preboot-follow-up"])
	benchutil.Ratio(b, "resumed-follow-up-archive/resumed-follow-up-p50", p50["resumed-follow-up-archive"], p50["resumed-follow-up"])
	for name, m := range claimMem {
		b.ReportMetric(float64(benchutil.Quantile(m, 0.5))/(1<<20), name+"-idle-slot-MiB")
	}
}
