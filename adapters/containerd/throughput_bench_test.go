package containerd

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkThroughput measures sandboxes per second at 1, 2, 4 and 8 concurrent, for
// the runner on runc, the runner on runsc (when installed) and a warm pool, each right
// after the raw containerd client on the same runtime (rawRun, create → exit →
// delete), in one run. Each level runs 2×concurrency sandboxes per path; a runner's time ends when
// its background removals are done too, so every path pays for its cleanup. The pool
// starts full (2×concurrency) and its time ends when the used sandboxes are removed:
// it is a burst figure (a pool's refill costs what a cold creation costs).
func BenchmarkThroughput(b *testing.B) {
	runc, image := poolEnv(b, "bench")
	paths := []struct {
		name string
		r    *Runner
	}{{"runc", runc}}
	if _, err := os.Stat(RuntimeRunscWrapper); err == nil {
		runsc, _ := poolEnv(b, "bench", WithRuntime(RuntimeRunsc))
		paths = append(paths, struct {
			name string
			r    *Runner
		}{"runsc", runsc})
	}
	ctx := context.Background()
	spec := func() port.RunSpec {
		return port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: image, Argv: []string{"/agent", "exit", "0"}}
	}
	// burst runs n sandboxes, conc at a time, and returns sandboxes per second.
	burst := func(n, conc int, run func() error, after func() error) float64 {
		t0 := time.Now()
		var wg sync.WaitGroup
		work := make(chan struct{}, n)
		for range n {
			work <- struct{}{}
		}
		close(work)
		errs := make(chan error, n)
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
			var raw float64
			for _, p := range paths {
				// The raw client on the same runtime, just before the runner.
				raw = burst(n, conc, func() error { _, _, _, err := rawRun(ctx, p.r, spec()); return err }, func() error { return nil })
				b.ReportMetric(raw, fmt.Sprintf("raw-%s-c%d-per-s", p.name, conc))
				got := burst(n, conc, func() error {
					res, err := p.r.RunOnce(ctx, spec())
					if err == nil && res.ExitCode != 0 {
						err = fmt.Errorf("exit %d", res.ExitCode)
					}
					return err
				}, func() error { return p.r.Drain(ctx) })
				b.ReportMetric(got, fmt.Sprintf("%s-c%d-per-s", p.name, conc))
				b.ReportMetric(got/raw, fmt.Sprintf("%s/raw-c%d-ratio", p.name, conc))
			}
			raw = burst(n, conc, func() error { _, _, _, err := rawRun(ctx, runc, spec()); return err }, func() error { return nil })
			pool, err := runc.NewPool(ctx, port.TemplateOf(spec()), port.PoolOptions{Size: n, RefillConcurrency: 2})
			if err != nil {
				b.Fatal(err)
			}
			waitReady(b, pool)
			got := burst(n, conc, func() error {
				res, err := pool.RunOnce(ctx, spec())
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exit %d", res.ExitCode)
				}
				return err
			}, func() error { return runc.Drain(ctx) })
			if st := pool.Stats(); st.Cold > 0 {
				b.Fatalf("a burst run found the pool empty: %+v", st)
			}
			if err := pool.Close(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(got, fmt.Sprintf("pooled-c%d-per-s", conc))
			b.ReportMetric(got/raw, fmt.Sprintf("pooled/raw-c%d-ratio", conc))
		}
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkIdleMemory holds 16 idle pooled sandboxes (created, and with their stubs
// started) and reports the memory each costs on the host: the proportional set size
// of its shim and of the processes in the sandbox (runc's init waiting to start, or
// the bridge waiting for its claim). An idle in-process proxy's share is measured by
// the inproc package's BenchmarkConcurrentRuns500.
func BenchmarkIdleMemory(b *testing.B) {
	const n = 16
	ctx := context.Background()
	for b.Loop() {
		for _, started := range []bool{false, true} {
			r, image := poolEnv(b, "bench", WithPoolStarted(started))
			p, err := r.NewPool(ctx, port.TemplateOf(suiteSpec(image)), port.PoolOptions{Size: n})
			if err != nil {
				b.Fatal(err)
			}
			waitReady(b, p)
			var shim, inside float64
			var slots []*slot
			for range n {
				slots = append(slots, <-p.ready)
			}
			for _, s := range slots {
				pid := int(s.task.Pid())
				inside += pssMiB(pid)
				shim += pssMiB(ppid(pid))
				p.ready <- s
			}
			name := "created"
			if started {
				name = "started"
			}
			b.ReportMetric(shim/n, "shim-"+name+"-MiB")
			b.ReportMetric(inside/n, "sandbox-"+name+"-MiB")
			if err := p.Close(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
}

// pssMiB is a process's proportional set size in MiB (0 if unreadable).
func pssMiB(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// ppid is a process's parent.
func ppid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	n, _ := strconv.Atoi(fields[1])
	return n
}
