package sandboxtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// poolHostEnv makes CrashChildMain's child a host that keeps a warm pool (the
// variable holds a poolHost) instead of running one run.
const poolHostEnv = "AGENTSANDBOX_SANDBOXTEST_POOL_HOST"

// poolHost is what the pool host child keeps.
type poolHost struct {
	Template port.PoolTemplate
	Size     int
	// Filling says the host reports at once, while its sandboxes are being made.
	Filling bool
}

// poolHostReady is the line the pool host child prints once its pool is full.
const poolHostReady = "pool ready"

// poolHostMain is CrashChildMain's child when poolHostEnv is set: it fills a pool of
// the runner's (a port.Pooler) and waits, holding it, to be killed.
func poolHostMain(r port.SandboxRunner, spec string) {
	var h poolHost
	if err := json.Unmarshal([]byte(spec), &h); err != nil {
		fmt.Fprintln(os.Stderr, "pool host:", err)
		os.Exit(3)
	}
	pr, ok := r.(port.Pooler)
	if !ok {
		fmt.Fprintf(os.Stderr, "pool host: %T is not a port.Pooler\n", r)
		os.Exit(3)
	}
	p, err := pr.WarmPool(context.Background(), h.Template, port.PoolOptions{Size: h.Size, RefillConcurrency: h.Size})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pool host:", err)
		os.Exit(3)
	}
	for end := time.Now().Add(5 * time.Minute); !h.Filling && p.Stats().Ready < h.Size; time.Sleep(10 * time.Millisecond) {
		if st := p.Stats(); st.Failed > 0 || time.Now().After(end) {
			fmt.Fprintf(os.Stderr, "pool host: the pool did not fill: %+v\n", st)
			os.Exit(3)
		}
	}
	fmt.Println(poolHostReady)
	time.Sleep(15 * time.Minute)
	os.Exit(4)
}

// PoolHostHarness is what TestPoolEndsWithHost needs.
type PoolHostHarness struct {
	// Sweeper is the adapter's sweeper, with the same owner (and pool directory) as
	// the runner the adapter's CrashChildMain callback makes when Env is set.
	Sweeper port.Sweeper
	// Env is added to the child's environment: what makes the adapter's callback
	// return the pool host's runner.
	Env []string
	// Bridge is the host path of the sandbox bridge binary (the pools' stub).
	Bridge string
	// Template and Size are the pool the child keeps.
	Template port.PoolTemplate
	Size     int
	// Running lists the owner's sandboxes whose processes run (the stubs, and a
	// pre-booted runtime with them); a sandbox created but never started runs none.
	Running func(ctx context.Context) ([]string, error)
	// Leftovers lists everything of the owner (after a sweep: nothing).
	Leftovers func(ctx context.Context) ([]string, error)
}

// PoolHostBound is how soon after its host's death TestPoolEndsWithHost requires
// every ready sandbox of its pool to have stopped.
const PoolHostBound = 15 * time.Second

// TestPoolEndsWithHost kills a host holding a full warm pool and requires every
// ready sandbox (and any runtime pre-booted in it) to stop by itself within
// PoolHostBound, as nobody will ever claim it; then a sweep of the owner leaves
// nothing. About 10 s, plus the pool's fill.
func TestPoolEndsWithHost(t *testing.T, h PoolHostHarness) {
	if h.Sweeper == nil || h.Running == nil || h.Leftovers == nil || h.Size < 1 || h.Bridge == "" {
		t.Fatal("sandboxtest: PoolHostHarness needs Sweeper, Running, Leftovers, Bridge and Size")
	}
	spec, err := json.Marshal(poolHost{Template: h.Template, Size: h.Size})
	if err != nil {
		t.Fatal(err)
	}
	c := startHost(t, CrashHarness{Bridge: h.Bridge, Image: h.Template.Image}, "pool-host", time.Minute, nil,
		append([]string{poolHostEnv + "=" + string(spec)}, h.Env...))
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(c.stdout).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != poolHostReady {
			err = fmt.Errorf("the pool host said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("the pool host did not fill its pool: %v", err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("the pool host did not fill its pool in 5 minutes")
	}
	ctx := context.Background()
	run, err := h.Running(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(run) < h.Size {
		t.Fatalf("the full pool has %d running sandboxes (%v), want %d: the test proves nothing", len(run), run, h.Size)
	}
	c.kill()
	killed := time.Now()
	if run := stillRunning(t, ctx, h, killed); len(run) == 0 {
		t.Logf("every ready sandbox stopped %v after its host died", time.Since(killed).Round(10*time.Millisecond))
	} else {
		t.Errorf("%d ready sandboxes still run %v after their host died: %v", len(run), PoolHostBound, run)
	}
	rep, err := h.Sweeper.Sweep(ctx, port.SweepOptions{})
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("sweep: %v %v", err, rep.Errors)
	}
	if left, err := h.Leftovers(ctx); err != nil || len(left) > 0 {
		t.Errorf("after the host died and a sweep: %v %v", left, err)
	}
}

// TestPoolHostKilledWhileFilling kills hosts while their pools' sandboxes are being
// made, at several moments of the making: whatever a host had made by then must stop
// by itself within PoolHostBound (nothing of it may wait for a claim), and a sweep of
// the owner must then leave nothing (no container, directory, lease or runtime
// process, such as a containerd shim whose task was never registered). About 15 s.
func TestPoolHostKilledWhileFilling(t *testing.T, h PoolHostHarness) {
	if h.Sweeper == nil || h.Running == nil || h.Leftovers == nil || h.Size < 1 || h.Bridge == "" {
		t.Fatal("sandboxtest: PoolHostHarness needs Sweeper, Running, Leftovers, Bridge and Size")
	}
	spec, err := json.Marshal(poolHost{Template: h.Template, Size: h.Size, Filling: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, after := range []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond} {
		c := startHost(t, CrashHarness{Bridge: h.Bridge, Image: h.Template.Image}, "pool-host", time.Minute, nil,
			append([]string{poolHostEnv + "=" + string(spec)}, h.Env...))
		line, err := bufio.NewReader(c.stdout).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != poolHostReady {
			t.Fatalf("the pool host did not start its pool: %q %v", line, err)
		}
		time.Sleep(after)
		c.kill()
		if run := stillRunning(t, ctx, h, time.Now()); len(run) > 0 {
			t.Errorf("killed %v into its pool's making: %d sandboxes still run %v after their host died: %v", after, len(run), PoolHostBound, run)
		}
		// The runtime finishes the requests in flight when the host died (a container,
		// a task, a snapshot may appear after it): wait until what is left stops
		// changing, then one sweep must take it all.
		settle(t, h)
		rep, err := h.Sweeper.Sweep(ctx, port.SweepOptions{})
		if err != nil || len(rep.Errors) > 0 {
			t.Fatalf("sweep: %v %v", err, rep.Errors)
		}
		t.Logf("killed %v into its pool's making: the sweep removed %d: %v", after, len(rep.Removed), rep.Removed)
		if left, err := h.Leftovers(ctx); err != nil || len(left) > 0 {
			t.Errorf("killed %v into its pool's making, after a sweep: %v %v", after, left, err)
		}
	}
}

// stillRunning polls h.Running until it lists nothing or PoolHostBound has passed
// since killed, and returns what runs then (nothing: every sandbox stopped).
func stillRunning(t *testing.T, ctx context.Context, h PoolHostHarness, killed time.Time) []string {
	t.Helper()
	for {
		run, err := h.Running(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(run) == 0 || time.Since(killed) > PoolHostBound {
			return run
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settle waits until the owner's leftovers have not changed for a second (at most
// 30 s): requests a dead host had in flight are done.
func settle(t *testing.T, h PoolHostHarness) {
	t.Helper()
	var last string
	stable := time.Now()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		left, err := h.Leftovers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if cur := strings.Join(left, " "); cur != last {
			last, stable = cur, time.Now()
		} else if time.Since(stable) > time.Second {
			return
		}
	}
}
