package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/openclawtest"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/openclaw/sandboxgw"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkOpenClawSandboxedGateway measures the gateway in a network=none session,
// side by side in one run on each runtime:
//   - start: start-to-ready (a client's handshake through the exposed socket) of the
//     sandboxed gateway against the same gateway started on the host;
//   - turn: one agent turn through the sandboxed gateway (register, prepare the run's
//     provider and model, the turn, release) against the same prompt in one-shot mode
//     (a fresh sandbox and a cold Node start per turn), and the sandbox's memory once
//     idle after its turns (its cgroup's usage).
func BenchmarkOpenClawSandboxedGateway(b *testing.B) {
	for _, rt := range []struct {
		name    string
		session func(testing.TB, string, string, string, ...docker.Option) (sessionRunner, string)
		oneShot func(testing.TB, string, imageFunc) (port.SandboxRunner, string)
	}{{"docker", dockerSessionRunner, dockerRunnerFor}, {"containerd", containerdSessionRunner, containerdRunnerFor}} {
		b.Run(rt.name+"/start", func(b *testing.B) {
			s := newGWBench(b, rt.session)
			var host, boxed []time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				openclawtest.StartGateway(b, openclaw.WithProviderName("unattributed"), openclaw.WithBaseURL("http://127.0.0.1:9/v1"),
					openclaw.WithModels(openclaw.Model{ID: gwModel, ContextWindow: 32000, MaxTokens: 1024}))
				host = append(host, time.Since(start))

				opts := s.opts
				opts.Dir, opts.RunID = b.TempDir(), sandboxtest.RunID("gwbench")
				start = time.Now()
				gw, err := sandboxgw.Start(context.Background(), opts)
				if err != nil {
					b.Fatal(err)
				}
				boxed = append(boxed, time.Since(start))
				_ = gw.Close(context.Background())
			}
			h := benchutil.Report(b, "host", host)
			x := benchutil.Report(b, "sandboxed", boxed)
			benchutil.Ratio(b, "sandboxed/host-p50", x, h)
		})
		b.Run(rt.name+"/turn", func(b *testing.B) {
			s := newGWBench(b, rt.session)
			stack := newOpenClawStack(b, rt.oneShot, s.fake)
			gw, err := sandboxgw.Start(context.Background(), s.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer gw.Close(context.Background())
			ctx := context.Background()
			// One turn first, not counted: a fresh gateway loads its agent runtime on
			// the first turn, once.
			s.benchTurn(ctx, b, gw, "WARM")
			b.ResetTimer()
			var viaGW, oneShot []time.Duration
			for i := 0; i < b.N; i++ {
				marker := fmt.Sprintf("TURN%c", 'A'+i%26)
				prompt := "Reply with the code word only. MARKER=" + marker

				start := time.Now()
				s.benchTurn(ctx, b, gw, marker)
				viaGW = append(viaGW, time.Since(start))

				start = time.Now()
				_, r, runErr := stack.run(ctx, b, sandboxtest.RunID("bench"), port.Attribution{BillingAccountID: "acct-bench"}, openclaw.Files{}, prompt, false)
				out, err := openclaw.ParseRun(r.Run, runErr)
				if err != nil || out.Text() != "ANSWER-"+marker {
					b.Fatalf("one-shot run: %v %q", err, out.Text())
				}
				oneShot = append(oneShot, time.Since(start))
			}
			g := benchutil.Report(b, "gateway", viaGW)
			o := benchutil.Report(b, "oneshot", oneShot)
			benchutil.Ratio(b, "oneshot/gateway-p50", o, g)
			time.Sleep(5 * time.Second) // idle
			if mem := idleMemory(b, gw); mem > 0 {
				b.ReportMetric(float64(mem)/(1<<20), "idle-MiB")
			}
		})
	}
}

// benchTurn is one agent turn through the sandboxed gateway gw, as a caller runs it: register
// the run with the router, the turn ("Reply with the code word only. MARKER=marker",
// which must answer ANSWER-marker), release.
func (s *gwStack) benchTurn(ctx context.Context, b *testing.B, gw *sandboxgw.Gateway, marker string) {
	b.Helper()
	reg, err := s.router.Register(billing.Run{RunID: sandboxtest.RunID("gwb"), Attribution: port.Attribution{BillingAccountID: "acct-bench"}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _, _ = reg.Stop(ctx) }()
	res, err := gw.Run(ctx, sandboxgw.RunRequest{Registration: reg, SessionKey: "bench-" + reg.RunID(), Model: gwModel, Message: "Reply with the code word only. MARKER=" + marker, Timeout: 2 * time.Minute})
	if err != nil || strings.TrimSpace(res.Text) != "ANSWER-"+marker {
		b.Fatalf("gateway turn: %v", err)
	}
}

// newGWBench is gwStack's set-up without the tests' canary.
func newGWBench(b *testing.B, newRunner func(testing.TB, string, string, string, ...docker.Option) (sessionRunner, string)) *gwStack {
	appDir, _ := openClawInstall(b)
	bin := testenv.Bridge(b)
	s := &gwStack{fake: litellmtest.NewServer(litellmtest.WithReply(markerReply))}
	b.Cleanup(s.fake.Close)
	var err error
	if s.router, err = billing.NewRouter(s.fake.URL, s.fake.MasterKey()); err != nil {
		b.Fatal(err)
	}
	s.runner, s.image = newRunner(b, bin, sandboxtest.RunID("ocgwbench"), b.TempDir())
	s.opts = sandboxgw.Options{
		Runner: s.runner, Router: s.router, Image: s.image,
		Command: []string{testimages.NodeBinary, testimages.AppDir + "/node_modules/openclaw/openclaw.mjs"},
		Mounts:  []port.Mount{{Source: appDir, Target: testimages.AppDir}},
		Dir:     b.TempDir(),
		Models:  []openclaw.Model{{ID: gwModel, ContextWindow: 32000, MaxTokens: 1024}},
		Config:  []openclaw.Option{openclaw.WithAgentTimeout(150 * time.Second)},
		RunID:   sandboxtest.RunID("ocgwb"),
	}
	return s
}

// idleMemory reads the sandbox's cgroup memory usage from inside (cgroup v2 or v1).
func idleMemory(b *testing.B, gw *sandboxgw.Gateway) int64 {
	sess := gw.Session()
	if sess == nil {
		return 0
	}
	res, err := sess.Exec(context.Background(), port.ExecSpec{Argv: []string{testimages.NodeBinary, "-e", `
const fs = require('fs');
for (const f of ['/sys/fs/cgroup/memory.current', '/sys/fs/cgroup/memory/memory.usage_in_bytes']) {
  try { console.log(fs.readFileSync(f, 'utf8').trim()); process.exit(0); } catch {}
}`}})
	if err != nil {
		b.Logf("reading memory: %v", err)
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
	return n
}
