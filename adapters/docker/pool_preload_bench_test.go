package docker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/benchutil"
	"github.com/agentsandbox/sandbox/internal/testenv"
	"github.com/agentsandbox/sandbox/internal/testimages"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/preload"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkPreloadedNode alternates, in one loop, a cold run and a pre-booted run of
// the same Node.js agent on Docker: the agent imports OpenClaw 2026.9.6's CLI entry
// module graph (dist/entry.js, which does nothing when imported: the imports-only
// pre-boot of DESIGN §11), then exits. The pre-booted slot's generic preloader
// imported it before the claim. Reported: wall time of RunOnce for each, their
// ratio, and the pooled run's p50. Needs NODE24_BIN and OPENCLAW_DIR.
func BenchmarkPreloadedNode(b *testing.B) {
	node, ocDir := os.Getenv("NODE24_BIN"), os.Getenv("OPENCLAW_DIR")
	testenv.Need(b, "openclaw", node != "" && ocDir != "", "NODE24_BIN and OPENCLAW_DIR are not set (scripts/install-openclaw.sh)")
	r, cli, _ := poolEnv(b, testenv.Owner("bench-preload"))
	ctx := context.Background()
	ref, archive, err := testimages.NodeArchive(ctx, node)
	if err != nil {
		b.Fatal(err)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, preload.NodeName), preload.Node, 0o644); err != nil {
		b.Fatal(err)
	}
	const entry = testimages.AppDir + "/node_modules/openclaw/dist/entry.js"
	if err := os.WriteFile(filepath.Join(dir, "agent.mjs"), []byte("await import('"+entry+"'); console.log('ok');\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	spec := port.RunSpec{
		Image: ref, Limits: port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 1 << 30, PIDs: 256},
		Argv: []string{testimages.NodeBinary, "/opt/preload/agent.mjs"},
		Preload: &port.Preload{
			Argv:   []string{testimages.NodeBinary, "/opt/preload/" + preload.NodeName, "--import", entry},
			Mounts: []port.Mount{{Source: dir, Target: "/opt/preload"}, {Source: ocDir, Target: testimages.AppDir}},
		},
	}
	p, err := r.NewPool(ctx, port.TemplateOf(spec), port.PoolOptions{Size: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	var cold, pre []time.Duration
	for b.Loop() {
		spec.RunID = sandboxtest.RunID("bench-cold")
		t0 := time.Now()
		res, err := r.RunOnce(ctx, spec)
		if err != nil || string(res.Stdout) != "ok\n" {
			b.Fatalf("cold: %v %+v", err, res)
		}
		cold = append(cold, time.Since(t0))
		if err := r.Drain(ctx); err != nil {
			b.Fatal(err)
		}
		waitReady(b, p)
		spec.RunID = sandboxtest.RunID("bench-pre")
		t0 = time.Now()
		res, err = p.RunOnce(ctx, spec)
		if err != nil || string(res.Stdout) != "ok\n" || res.Start != port.StartPreloaded {
			b.Fatalf("preloaded: %v %+v", err, res)
		}
		pre = append(pre, time.Since(t0))
		if err := r.Drain(ctx); err != nil {
			b.Fatal(err)
		}
	}
	p50 := benchutil.Report(b, "preloaded", pre)
	c50 := benchutil.Report(b, "cold", cold)
	benchutil.Ratio(b, "preloaded/cold-p50-ratio", p50, c50)
	b.ReportMetric(0, "ns/op")
}
