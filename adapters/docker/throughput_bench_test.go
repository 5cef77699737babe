package docker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkThroughput measures sandboxes per second at 1, 2, 4 and 8 concurrent for
// the runner on runc and on runsc (when registered), each right after the raw Docker
// API on the same runtime (rawRun: create, attach, start, wait, remove), in one run.
// Each level runs 2×concurrency sandboxes per path; the runner's time ends when its
// background removals are done too, so both sides pay for removal.
func BenchmarkThroughput(b *testing.B) {
	cli, image := dockerEnv(b)
	runtimes := []string{""}
	if info, err := cli.Info(context.Background(), client.InfoOptions{}); err == nil {
		if _, ok := info.Info.Runtimes["runsc"]; ok {
			runtimes = append(runtimes, "runsc")
		}
	}
	ctx := context.Background()
	spec := func() port.RunSpec {
		return port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: image, Argv: []string{"/agent", "exit", "0"}}
	}
	burst := func(n, conc int, run func() error, after func() error) float64 {
		t0 := time.Now()
		work := make(chan struct{}, n)
		for range n {
			work <- struct{}{}
		}
		close(work)
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for range work {
					if err := run(); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		if err := after(); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return float64(n) / d.Seconds()
	}
	for b.Loop() {
		for _, conc := range []int{1, 2, 4, 8} {
			n := 2 * conc
			for _, rt := range runtimes {
				opts := []Option{WithClient(cli), WithOwner(testenv.Owner("bench"))}
				name := "runc"
				if rt != "" {
					opts, name = append(opts, WithRuntime(rt)), rt
				}
				r, err := NewRunner(opts...)
				if err != nil {
					b.Fatal(err)
				}
				raw := burst(n, conc, func() error { _, _, err := rawRun(ctx, cli, spec(), rt); return err }, func() error { return nil })
				got := burst(n, conc, func() error {
					res, err := r.RunOnce(ctx, spec())
					if err == nil && res.ExitCode != 0 {
						err = fmt.Errorf("exit %d", res.ExitCode)
					}
					return err
				}, func() error { return r.Drain(ctx) })
				b.ReportMetric(raw, fmt.Sprintf("raw-%s-c%d-per-s", name, conc))
				b.ReportMetric(got, fmt.Sprintf("%s-c%d-per-s", name, conc))
				b.ReportMetric(got/raw, fmt.Sprintf("%s/raw-c%d-ratio", name, conc))
				_ = r.Close()
			}
		}
	}
	b.ReportMetric(0, "ns/op")
}
