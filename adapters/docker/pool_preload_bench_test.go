package docker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
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
	var (
		cold, pre []time.Duration
		idle      []float64 // MiB of a ready slot, its runtime booted
	)
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
		idle = append(idle, slotMemory(b, cli, p))
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
	slices.Sort(idle)
	b.ReportMetric(idle[len(idle)/2], "idle-slot-MiB")
	b.ReportMetric(0, "ns/op")
}

// slotMemory is the memory a ready slot's container uses (its cgroup's usage less
// the page cache, as docker stats shows it), in MiB: a pre-booted runtime's cost
// while it waits for a claim.
func slotMemory(b *testing.B, cli *client.Client, p *Pool) float64 {
	b.Helper()
	s := <-p.ready
	defer func() { p.ready <- s }()
	st, err := cli.ContainerStats(context.Background(), s.id, client.ContainerStatsOptions{Stream: false})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Body.Close()
	var v struct {
		MemoryStats struct {
			Usage uint64            `json:"usage"`
			Stats map[string]uint64 `json:"stats"`
		} `json:"memory_stats"`
	}
	if err := json.NewDecoder(st.Body).Decode(&v); err != nil {
		b.Fatal(err)
	}
	use := v.MemoryStats.Usage - v.MemoryStats.Stats["total_inactive_file"]
	return float64(use) / (1 << 20)
}
