package containerd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkLiveSandboxes holds ever more live idle sandboxes at once, each with its own
// in-process LLM proxy attached (the agent sleeps; its bridge listens and forwards),
// adding SCALE_STEP (default 64) at a time, 4 creations at once, until a sandbox fails
// to start or ends early, or a guard stops the climb first: the host's available memory
// below SCALE_MIN_FREE_MIB (default 3072), or the host's tasks (threads) above 60% of
// kernel.pid_max or kernel.threads-max, so that a shared machine's other work keeps
// running, or SCALE_MINUTES (default 20) of climbing; SCALE_MAX (default 4096) caps it. It reports the largest number held, what
// stopped the climb, and the memory per sandbox at the end: the proportional set size
// of the shim, of the bridge and of the agent (16 sampled), and the proxies' heap.
// Everything is removed afterwards. A bench-only run (scripts/bench.sh LiveSandboxes):
// it takes minutes and most of the machine.
func BenchmarkLiveSandboxes(b *testing.B) {
	maxN, step := envInt("SCALE_MAX", 4096), envInt("SCALE_STEP", 64)
	minFree := uint64(envInt("SCALE_MIN_FREE_MIB", 3072))
	budget := time.Duration(envInt("SCALE_MINUTES", 20)) * time.Minute
	for b.Loop() {
		liveSandboxes(b, maxN, step, minFree, budget)
	}
	b.ReportMetric(0, "ns/op")
}

func liveSandboxes(b *testing.B, maxN, step int, minFree uint64, budget time.Duration) {
	r, image := runnerEnv(b, WithOwner(testenv.Owner("bench-scale")), WithBridge(testenv.Bridge(b)))
	// Whatever the teardown below could not remove (the daemon restarted under the
	// climb, say) is this owner's alone: swept last, and before, from an earlier run.
	sweep := func() {
		rep, err := r.Sweep(context.Background(), port.SweepOptions{})
		if err != nil || len(rep.Errors) > 0 {
			b.Errorf("sweeping bench-scale: %v %v", err, rep.Errors)
		} else if len(rep.Removed) > 0 {
			b.Logf("swept %d leftovers of bench-scale", len(rep.Removed))
		}
	}
	sweep()
	defer sweep()
	base, err := os.MkdirTemp("", "bench-scale")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	pm, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(testenv.Owner("bench-scale")), inprocproxy.WithSandboxUID(1001))
	if err != nil {
		b.Fatal(err)
	}
	defer pm.Shutdown(context.Background())

	runCtx, stopRuns := context.WithCancel(context.Background())
	defer stopRuns()
	var (
		mu      sync.Mutex
		runIDs  = map[string]bool{}
		ended   []string // runs that ended before the teardown: a failure
		proxies []port.Proxy
		wg      sync.WaitGroup
	)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := func() error {
		runID := sandboxtest.RunID("scale")
		px, err := pm.Start(runCtx, port.ProxySpec{RunID: runID, Upstream: "http://127.0.0.1:9", APIKey: "k", Attribution: port.Attribution{BillingAccountID: "a"}})
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		sock := px.Socket()
		mu.Lock()
		runIDs[runID], proxies = true, append(proxies, px)
		mu.Unlock()
		spec := port.RunSpec{RunID: runID, Image: image, Argv: []string{"/agent", "sleep", "7200"}, LLM: &sock,
			Limits: port.Limits{Timeout: 3 * time.Hour, MemoryBytes: 64 << 20}}
		wg.Go(func() {
			res, err := r.RunOnce(runCtx, spec)
			if runCtx.Err() == nil {
				msg := fmt.Sprintf("%s ended: %v", runID, err)
				if res != nil {
					msg += fmt.Sprintf(" (exit %d, stderr %q)", res.ExitCode, clipBytes(res.Stderr))
				}
				mu.Lock()
				ended = append(ended, msg)
				mu.Unlock()
			}
		})
		return nil
	}
	running := func(ctx context.Context) (map[uint32]bool, error) {
		resp, err := r.cli.TaskService().List(r.ns(ctx), nil)
		if err != nil {
			return nil, err
		}
		pids := map[uint32]bool{}
		mu.Lock()
		defer mu.Unlock()
		for _, t := range resp.Tasks {
			if id, ok := runOfContainer(t.ID); ok && runIDs[id] && t.Status.String() == "RUNNING" {
				pids[t.Pid] = true
			}
		}
		return pids, nil
	}

	t0 := time.Now()
	var held int
	var stopped string
	for held < maxN && stopped == "" {
		if free := memAvailableMiB(); free < minFree {
			stopped = fmt.Sprintf("memory guard: %d MiB available, under %d", free, minFree)
			break
		}
		if time.Since(t0) > budget {
			stopped = fmt.Sprintf("time guard: %v of climbing (SCALE_MINUTES)", budget)
			break
		}
		if tasks, limit := hostTasks(); tasks > limit*6/10 {
			stopped = fmt.Sprintf("task guard: %d host tasks, over 60%% of %d (kernel.pid_max / threads-max)", tasks, limit)
			break
		}
		batch := min(step, maxN-held)
		sem := make(chan struct{}, 4)
		var errs []error
		var emu sync.Mutex
		var bw sync.WaitGroup
		for range batch {
			sem <- struct{}{}
			bw.Go(func() {
				defer func() { <-sem }()
				if err := start(); err != nil {
					emu.Lock()
					errs = append(errs, err)
					emu.Unlock()
				}
			})
		}
		bw.Wait()
		if len(errs) > 0 {
			stopped = fmt.Sprintf("starting failed: %v", errors.Join(errs...))
			break
		}
		want := held + batch
		deadline := time.Now().Add(5 * time.Minute)
		for {
			pids, err := running(context.Background())
			if err != nil {
				stopped = fmt.Sprintf("listing tasks: %v", err)
				break
			}
			mu.Lock()
			early := append([]string(nil), ended...)
			mu.Unlock()
			if len(early) > 0 {
				stopped = fmt.Sprintf("%d sandboxes ended early; first: %s", len(early), early[0])
				break
			}
			if len(pids) >= want {
				held = want
				break
			}
			if time.Now().After(deadline) {
				stopped = fmt.Sprintf("only %d of %d sandboxes running after 5 minutes", len(pids), want)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		b.Logf("%d live sandboxes after %v; %d MiB available", held, time.Since(t0).Round(time.Second), memAvailableMiB())
	}
	if stopped == "" {
		stopped = fmt.Sprintf("the cap SCALE_MAX=%d", maxN)
	}
	climb := time.Since(t0)

	// Memory per sandbox, on 16 sampled live ones.
	pids, _ := running(context.Background())
	var sample []int
	for pid := range pids {
		sample = append(sample, int(pid))
	}
	rand.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	sample = sample[:min(16, len(sample))]
	var shim, bridgeMiB, agent float64
	for _, pid := range sample {
		shim += pssMiB(ppid(pid))
		bridgeMiB += pssMiB(pid)
		for _, c := range testenv.Children(pid) {
			agent += pssMiB(c)
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if k := float64(len(sample)); k > 0 {
		b.ReportMetric(shim/k, "shim-MiB")
		b.ReportMetric(bridgeMiB/k, "bridge-MiB")
		b.ReportMetric(agent/k, "agent-MiB")
	}
	if held > 0 {
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/float64(held)/1024, "proxy+run-heap-KiB")
	}
	b.ReportMetric(float64(held), "live-max")
	b.ReportMetric(climb.Seconds(), "climb-s")
	fmt.Printf("largest number of live sandboxes with their proxies held: %d in %v; stopped by %s\n", held, climb.Round(time.Second), stopped)

	// Teardown: every run is cancelled (killed), its proxy stopped, its sandbox removed.
	t1 := time.Now()
	stopRuns()
	wg.Wait()
	for _, px := range proxies {
		_, _ = px.Stop(context.Background())
	}
	if err := r.Drain(context.Background()); err != nil {
		b.Error(err)
	}
	if pids, err := running(context.Background()); err != nil || len(pids) > 0 {
		b.Errorf("after teardown: %d sandboxes still running (%v)", len(pids), err)
	}
	b.ReportMetric(time.Since(t1).Seconds(), "teardown-s")
}

// runOfContainer returns the run ID of a container the runner named
// (agentsandbox-<run>-<hex>).
func runOfContainer(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, "agentsandbox-")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", false
	}
	return rest[:i], true
}

// memAvailableMiB is /proc/meminfo's MemAvailable in MiB.
func memAvailableMiB() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb / 1024
		}
	}
	return 0
}

// hostTasks returns the host's tasks (threads) now, from /proc/loadavg, and the lower
// of kernel.pid_max and kernel.threads-max.
func hostTasks() (tasks, limit int) {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 4 {
			if _, total, ok := strings.Cut(f[3], "/"); ok {
				tasks, _ = strconv.Atoi(total)
			}
		}
	}
	limit = 1 << 30
	for _, p := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		if b, err := os.ReadFile(p); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n < limit {
				limit = n
			}
		}
	}
	return tasks, limit
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func clipBytes(b []byte) string {
	if len(b) > 200 {
		return string(b[len(b)-200:])
	}
	return string(b)
}
