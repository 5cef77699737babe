package nomad

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkRunOverheadVsDocker alternates a run of a trivial command on the Nomad
// cluster (submit, place, run, collect output, purge) with the same run on the Docker
// runner (same engine, same lockdown, same bridge), so both see the same machine
// noise, and reports medians, p95s and the ratio nomad/docker.
func BenchmarkRunOverheadVsDocker(b *testing.B) {
	e := setup(b)
	n := e.runner(b)
	d, err := docker.NewRunner(docker.WithOwner(e.owner), docker.WithBridge(e.bridge), docker.WithCleanupConcurrency(0))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	run := func(r port.SandboxRunner) time.Duration {
		t0 := time.Now()
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: e.image, Argv: []string{"/agent", "echo", "out", "err"}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "out" {
			b.Fatalf("RunOnce: %v %+v", err, res)
		}
		return time.Since(t0)
	}
	var nomad, dock []time.Duration
	b.ResetTimer()
	for b.Loop() {
		nomad = append(nomad, run(n))
		dock = append(dock, run(d))
	}
	b.StopTimer()
	n50 := benchutil.Report(b, "nomad", nomad)
	d50 := benchutil.Report(b, "docker", dock)
	benchutil.Ratio(b, "nomad/docker-p50-ratio", n50, d50)
	b.ReportMetric(0, "ns/op")
}

// BenchmarkThroughput runs batches of 1, 4 and 16 concurrent sandboxes on the
// two-client cluster and reports runs per second and how the runs were spread.
func BenchmarkThroughput(b *testing.B) {
	e := setup(b)
	for _, conc := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("concurrent=%d", conc), func(b *testing.B) {
			r := e.runner(b)
			var mu sync.Mutex
			nodes := map[string]int{}
			r.observe = func(a *api.Allocation) { mu.Lock(); nodes[a.NodeName]++; mu.Unlock() }
			runs := 0
			start := time.Now()
			for b.Loop() {
				var wg sync.WaitGroup
				for i := 0; i < conc; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						res, err := r.RunOnce(context.Background(), port.RunSpec{RunID: sandboxtest.RunID("tput"), Image: e.image, Argv: []string{"/agent", "exit", "0"}})
						if err != nil || res.ExitCode != 0 {
							b.Errorf("RunOnce: %v %+v", err, res)
						}
					}()
				}
				wg.Wait()
				runs += conc
			}
			el := time.Since(start)
			b.ReportMetric(float64(runs)/el.Seconds(), "runs/s")
			b.ReportMetric(float64(el)/float64(runs)/1e6, "ms/run")
			b.ReportMetric(0, "ns/op")
			b.Logf("%d runs at %d at once: %v per node", runs, conc, nodes)
		})
	}
}
