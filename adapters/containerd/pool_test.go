package containerd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"

	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// poolEnv returns a runner with the bridge and a private pool directory, for owner.
func poolEnv(t testing.TB, owner string, opts ...Option) (*Runner, string) {
	t.Helper()
	return runnerEnv(t, append([]Option{WithOwner(testenv.Owner(owner)), WithBridge(testenv.Bridge(t)), WithPoolDir(t.TempDir())}, opts...)...)
}

// waitReady waits until every pool is full: a readiness wait, not a timing assertion.
func waitReady(t testing.TB, pools ...*Pool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for _, p := range pools {
		for p.Stats().Ready < p.size {
			if time.Now().After(deadline) {
				t.Fatalf("pool never filled: %+v", p.Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// router serves each run from the pool of its shape, else cold on the runner.
type router struct {
	r     *Runner
	pools []*Pool
}

func (rt router) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	t := port.TemplateOf(spec)
	for _, p := range rt.pools {
		if t.Equal(p.Template()) {
			return p.RunOnce(ctx, spec)
		}
	}
	return rt.r.RunOnce(ctx, spec)
}

// ownedLeftovers lists everything of r's owner: containers, snapshots, leases and slot
// directories.
func ownedLeftovers(t testing.TB, r *Runner) []string {
	t.Helper()
	ctx := r.ns(context.Background())
	if err := r.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	filter := fmt.Sprintf(`labels.%q==%q`, port.LabelOwner, r.cfg.owner)
	var out []string
	cs, err := r.cli.Containers(ctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		out = append(out, "container:"+c.ID())
	}
	err = r.cli.SnapshotService(r.cfg.snapshotter).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		out = append(out, "snapshot:"+info.Name)
		return nil
	}, filter)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(r.poolDir())
	for _, e := range ents {
		out = append(out, "dir:"+e.Name())
	}
	fifos, _ := filepath.Glob(filepath.Join(FIFORoot, "*", poolIDPrefix(r.cfg.namespace, r.cfg.owner)+"*"))
	for _, f := range fifos {
		out = append(out, "fifo:"+f)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if n := strings.Count(string(mi), r.poolDir()); n > 0 {
		out = append(out, fmt.Sprintf("mounts:%d", n))
	}
	// Shims: a shim of one of the owner's sandboxes outlives its container only when
	// a host died making it (Sweep ends those).
	for _, sh := range ownerShims(r.cfg.namespace, r.cfg.owner) {
		out = append(out, fmt.Sprintf("shim:%d(%s)", sh.pid, sh.id))
	}
	runc, _ := filepath.Glob(filepath.Join("/run/containerd/runc", r.cfg.namespace, poolIDPrefix(r.cfg.namespace, r.cfg.owner)+"*"))
	for _, d := range runc {
		out = append(out, "runc:"+d)
	}
	// Leases: every holder of the owner is gone once its pools closed (a dead
	// host's are pruned by the sweep).
	ls, _ := runlease.List(runlease.DefaultRoot(), r.cfg.owner)
	for _, l := range ls {
		out = append(out, fmt.Sprintf("lease:%s/%s(held=%v)", l.RunID, l.Holder, l.Held))
	}
	return out
}

// suiteSpec is the shape of porttest's runs (see porttest's spec helper).
func suiteSpec(image string) port.RunSpec {
	return port.RunSpec{Image: image, Argv: []string{"/agent"}, Limits: port.Limits{Timeout: time.Minute, MemoryBytes: 128 << 20}}
}

// TestPoolConformance runs the runner conformance suite on pooled runs: one pool per
// shape the suite uses (plain, workspace, read-only and writable mount), so its runs
// are served warm, then requires nothing left after the pools close.
func TestPoolConformance(t *testing.T) { poolConformance(t) }

// TestPoolCreatedConformance is TestPoolConformance with the stubs started only at the
// claim (WithPoolStarted(false)).
func TestPoolCreatedConformance(t *testing.T) { poolConformance(t, WithPoolStarted(false)) }

func poolConformance(t *testing.T, opts ...Option) {
	r, image := poolEnv(t, "porttest-pool", opts...)
	base := suiteSpec(image)
	shapes := []port.RunSpec{base, base, base, base}
	shapes[1].WorkspaceDir = "/"
	shapes[2].Mounts = []port.Mount{{Source: "/", Target: "/data"}}
	shapes[3].Mounts = []port.Mount{{Source: "/", Target: "/data", Writable: true}}
	rt := router{r: r}
	ctx := context.Background()
	for i, s := range shapes {
		size := 1
		if i == 0 {
			size = 6
		}
		p, err := r.NewPool(ctx, port.TemplateOf(s), port.PoolOptions{Size: size})
		if err != nil {
			t.Fatal(err)
		}
		rt.pools = append(rt.pools, p)
	}
	waitReady(t, rt.pools...)
	t.Run("suite", func(t *testing.T) {
		sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: rt, Image: image, Leftovers: leftovers(r)})
	})
	for i, p := range rt.pools {
		st := p.Stats()
		t.Logf("pool %d: %+v", i, st)
		if st.Warm == 0 {
			t.Errorf("pool %d served no run warm: the suite did not test pooled runs", i)
		}
	}
	for _, p := range rt.pools {
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if left := ownedLeftovers(t, r); len(left) > 0 {
		t.Errorf("after the pools closed: %v", left)
	}
}

// TestPoolLLMSocketAttachedAtClaim: the run's socket directory, which did not exist
// when the sandbox was created, is what the bridge forwards to; the sandbox sees the
// run's environment and none of the stub's channel.
func TestPoolLLMSocketAttachedAtClaim(t *testing.T) {
	r, image := poolEnv(t, "pool-llm")
	spec := suiteSpec(image)
	spec.LLM = &port.LLMSocket{HostDir: "/"}
	p, err := r.NewPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	waitReady(t, p)

	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, port.LLMSocketName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, port.LLMSocketName), 0o666); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "proxy-of-this-run") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	spec.RunID = sandboxtest.RunID("pool-llm")
	spec.LLM = &port.LLMSocket{HostDir: dir}
	spec.Argv = []string{"/agent", "http", "http://127.0.0.1:8080/"}
	res, err := p.RunOnce(context.Background(), spec)
	if err != nil {
		t.Fatalf("%v: %s", err, res.Stderr)
	}
	if !strings.Contains(string(res.Stdout), "proxy-of-this-run") {
		t.Errorf("the agent did not reach the run's socket: %s / %s", res.Stdout, res.Stderr)
	}
	spec.RunID = sandboxtest.RunID("pool-env")
	if st := p.Stats(); st.Warm != 1 {
		t.Fatalf("the first run was not warm: %+v", st)
	}
	waitReady(t, p)
	spec.Argv = []string{"/agent", "env"}
	spec.Env = map[string]string{"ONLY": "this"}
	res, err = p.RunOnce(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	env := string(res.Stdout)
	for _, want := range []string{"ONLY=this", "OPENAI_API_BASE=http://127.0.0.1:8080", "HOSTNAME=sandbox"} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("env lacks %s:\n%s", want, env)
		}
	}
	if st := p.Stats(); st.Warm != 2 {
		t.Errorf("the second run was not warm: %+v", st)
	}
}

// TestPoolRunsThenCleanup: many pooled runs in a row (POOL_RUNS, default 1000), every
// one warm, then nothing of the owner left once the pool is closed.
func TestPoolRunsThenCleanup(t *testing.T) {
	if testing.Short() {
		t.Skip("long: -short")
	}
	n := testenv.Count("POOL_RUNS", 1000)
	r, image := poolEnv(t, "pool-many")
	spec := suiteSpec(image)
	p, err := r.NewPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 4, RefillConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range n {
		// Wait for a ready sandbox so every run is a pooled one.
		for p.Stats().Ready == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		spec.RunID = sandboxtest.RunID("pool-many")
		spec.Argv = []string{"/agent", "exit", fmt.Sprint(i % 3)}
		res, err := p.RunOnce(ctx, spec)
		if err != nil || res.ExitCode != i%3 {
			t.Fatalf("run %d: %v %+v", i, err, res)
		}
	}
	if st := p.Stats(); st.Warm != int64(n) || st.Failed != 0 {
		t.Errorf("stats after %d runs: %+v", n, st)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := ownedLeftovers(t, r); len(left) > 0 {
		t.Errorf("after %d pooled runs and Close: %v", n, left)
	}
}

// TestPoolClosedWithRunner: closing the runner closes its pools and removes every
// ready sandbox; a pool cannot be made on a closed runner.
func TestPoolClosedWithRunner(t *testing.T) {
	r, image := poolEnv(t, "pool-close")
	p, err := r.NewPool(context.Background(), port.TemplateOf(suiteSpec(image)), port.PoolOptions{Size: 3})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, p)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2, _ := poolEnv(t, "pool-close", WithPoolDir(r.cfg.poolDir))
	if left := ownedLeftovers(t, r2); len(left) > 0 {
		t.Errorf("after the runner closed: %v", left)
	}
	if _, err := r.NewPool(context.Background(), port.TemplateOf(suiteSpec(image)), port.PoolOptions{Size: 1}); !errors.Is(err, port.ErrUnavailable) {
		t.Errorf("NewPool on a closed runner: %v", err)
	}
}

// TestPoolSweepAfterCrash kills a host mid pooled run; Sweep of the run removes its
// sandbox and slot directory, and a Sweep of the owner the rest of the dead pool.
func TestPoolSweepAfterCrash(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(poolCrashEnv, dir)
	r, image := runnerEnv(t, WithOwner(testenv.Owner("crash-pool")), WithPoolDir(dir))
	sandboxtest.TestSweepAfterCrash(t, sandboxtest.CrashHarness{Sweeper: r, Leftovers: leftovers(r), Image: image, Bridge: testenv.Bridge(t)})
	rep, err := r.Sweep(context.Background(), port.SweepOptions{})
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("sweep: %v %v", err, rep.Errors)
	}
	t.Logf("the rest of the dead pool: %v", rep.Removed)
	if left := ownedLeftovers(t, r); len(left) > 0 {
		t.Errorf("after the sweeps: %v", left)
	}
}

// poolCrashEnv makes TestMain's crash child serve its run from a warm pool whose slot
// directories are under the variable's value.
const poolCrashEnv = "AGENTSANDBOX_TEST_POOL_CRASH"

// crashPool is the crash child's runner when poolCrashEnv is set: a full pool of the
// crash run's shape.
func crashPool(bridge string) (port.SandboxRunner, error) {
	r, err := NewRunner(WithNamespace(testNamespace), WithOwner(testenv.Owner("crash-pool")), WithBridge(bridge), WithPoolDir(os.Getenv(poolCrashEnv)))
	if err != nil {
		return nil, err
	}
	// The crash run's shape (see sandboxtest.CrashChildMain).
	tmpl := port.TemplateOf(port.RunSpec{Image: os.Getenv("AGENTSANDBOX_SANDBOXTEST_CRASH_IMAGE")})
	p, err := r.NewPool(context.Background(), tmpl, port.PoolOptions{Size: 2})
	if err != nil {
		return nil, err
	}
	for p.Stats().Ready < 2 {
		if p.Stats().Failed > 0 {
			return nil, errors.New("pool creation failed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p, nil
}

func TestPoolOptionsValidate(t *testing.T) {
	r, err := NewRunner(WithBridge(testenv.Bridge(t)))
	if err != nil {
		t.Fatal(err)
	}
	ok := port.PoolTemplate{Image: "x", User: "1001:1001", Limits: port.RunSpec{}.WithDefaults().Limits}
	for name, c := range map[string]struct {
		t port.PoolTemplate
		o port.PoolOptions
	}{
		"zero size":       {ok, port.PoolOptions{}},
		"negative refill": {ok, port.PoolOptions{Size: 1, RefillConcurrency: -1}},
		"root user":       {port.PoolTemplate{Image: "x", User: "0", Limits: ok.Limits}, port.PoolOptions{Size: 1}},
		"no image":        {port.PoolTemplate{User: "1001", Limits: ok.Limits}, port.PoolOptions{Size: 1}},
	} {
		if _, err := r.WarmPool(context.Background(), c.t, c.o); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec", name, err)
		}
	}
	noBridge, err := NewRunner()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noBridge.WarmPool(context.Background(), ok, port.PoolOptions{Size: 1}); !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("without a bridge: err = %v, want ErrUnsupported", err)
	}
}

// TestPoolDropsDeadStub: a ready sandbox whose stub was killed before its claim is
// dropped, and the run still completes.
func TestPoolDropsDeadStub(t *testing.T) {
	r, image := poolEnv(t, "pool-dead")
	ctx := r.ns(context.Background())
	spec := suiteSpec(image)
	p, err := r.NewPool(ctx, port.TemplateOf(spec), port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	waitReady(t, p)
	s := <-p.ready
	if err := s.task.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Wait for what the pool itself watches: the exit delivered on the slot's wait
	// channel (buffered, so len shows it without taking it). The task's status can say
	// Stopped before the exit event has arrived.
	for len(s.statusC) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	p.ready <- s
	spec.RunID = sandboxtest.RunID("pool-dead")
	spec.Argv = []string{"/agent", "echo", "out", "err"}
	res, err := p.RunOnce(context.Background(), spec)
	if err != nil || string(res.Stdout) != "out" {
		t.Fatalf("%v: %+v", err, res)
	}
	if st := p.Stats(); st.Failed != 1 {
		t.Errorf("the dead stub was not dropped: %+v", st)
	}
}

// TestPoolForgedExitRecord: records the agent forges are its output and leave its
// exit code alone (sandboxtest.TestPoolForgedExitRecord). About 2 s.
func TestPoolForgedExitRecord(t *testing.T) {
	r, image := poolEnv(t, "pool-forge")
	sandboxtest.TestPoolForgedExitRecord(t, r, image)
}

// TestPoolStubUnreadable: the agent cannot read the claim or its nonce out of the stub
// (sandboxtest.TestPoolStubUnreadable). About 1 s.
func TestPoolStubUnreadable(t *testing.T) {
	r, image := poolEnv(t, "pool-undump")
	sandboxtest.TestPoolStubUnreadable(t, r, image)
}
