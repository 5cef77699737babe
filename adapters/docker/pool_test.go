package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// poolEnv returns a runner with the bridge and a private pool directory, for owner.
func poolEnv(t testing.TB, owner string, opts ...Option) (*Runner, *client.Client, string) {
	t.Helper()
	testenv.Need(t, "root", os.Getuid() == 0, "warm pools mount the runs' directories")
	cli, image := dockerEnv(t)
	r, err := NewRunner(append([]Option{WithClient(cli), WithOwner(owner), WithBridge(testenv.Bridge(t)), WithPoolDir(t.TempDir())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, cli, image
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

// poolLeftovers is leftovers by run ID plus the pooled sandboxes the run claimed.
func poolLeftovers(r *Runner, cli *client.Client) func(context.Context, string) ([]string, error) {
	byLabel := drained(r, leftovers(cli))
	return func(ctx context.Context, runID string) ([]string, error) {
		out, err := byLabel(ctx, runID)
		if err != nil {
			return nil, err
		}
		cs, err := r.pooledContainers(ctx, runID)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			out = append(out, "container:"+c.ID)
		}
		return out, nil
	}
}

// ownedLeftovers lists everything of r's owner: containers, slot directories and
// mounts under them.
func ownedLeftovers(t testing.TB, r *Runner, cli *client.Client) []string {
	t.Helper()
	ctx := context.Background()
	if err := r.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var out []string
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", port.LabelOwner+"="+r.cfg.owner)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs.Items {
		out = append(out, "container:"+c.ID)
	}
	ents, _ := os.ReadDir(r.poolDir())
	for _, e := range ents {
		out = append(out, "dir:"+e.Name())
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if n := strings.Count(string(mi), r.poolDir()); n > 0 {
		out = append(out, fmt.Sprintf("mounts:%d", n))
	}
	// Leases: every holder of the owner is gone once its pools closed (a dead
	// host's are pruned by the sweep).
	ls, _ := runlease.List(runlease.DefaultRoot(), r.cfg.owner)
	for _, l := range ls {
		out = append(out, fmt.Sprintf("lease:%s/%s(held=%v)", l.RunID, l.Holder, l.Held))
	}
	return out
}

// suiteSpec is the shape of the conformance suite's runs.
func suiteSpec(image string) port.RunSpec {
	return port.RunSpec{Image: image, Argv: []string{"/agent"}, Limits: port.Limits{Timeout: time.Minute, MemoryBytes: 128 << 20}}
}

// TestPoolConformance runs the runner conformance suite on pooled runs (the same suite
// and shapes as the containerd pool's): one pool per shape the suite uses (plain,
// workspace, read-only and writable mount), then requires nothing left after the
// pools close. About 40 s.
func TestPoolConformance(t *testing.T) {
	r, cli, image := poolEnv(t, testenv.Owner("porttest-pool"))
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
			size = 4
		}
		p, err := r.NewPool(ctx, port.TemplateOf(s), port.PoolOptions{Size: size})
		if err != nil {
			t.Fatal(err)
		}
		rt.pools = append(rt.pools, p)
	}
	waitReady(t, rt.pools...)
	t.Run("suite", func(t *testing.T) {
		sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: rt, Image: image, Leftovers: poolLeftovers(r, cli)})
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
	if left := ownedLeftovers(t, r, cli); len(left) > 0 {
		t.Errorf("after the pools closed: %v", left)
	}
}

// TestPoolLLMSocketAttachedAtClaim: the run's socket directory, which did not exist
// when the sandbox started, is what the bridge forwards to; the sandbox sees the run's
// environment and its name carries the run.
func TestPoolLLMSocketAttachedAtClaim(t *testing.T) {
	r, cli, image := poolEnv(t, testenv.Owner("pool-llm"))
	spec := suiteSpec(image)
	spec.LLM = &port.LLMSocket{HostDir: "/"}
	p, err := r.NewPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
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
	if st := p.Stats(); st.Warm != 1 {
		t.Fatalf("the first run was not warm: %+v", st)
	}
	waitReady(t, p)
	spec.RunID = sandboxtest.RunID("pool-env")
	spec.Argv = []string{"/agent", "sleep", "30"}
	spec.Env = map[string]string{"ONLY": "this"}
	type outcome struct {
		res *port.RunResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := p.RunOnce(context.Background(), spec)
		done <- outcome{res, err}
	}()
	// While it runs, with its lease gone (as if its host had died: a live host's lease
	// keeps Sweep away, see TestPoolRunLease), Sweep by run ID sees it (dry run)
	// through its name.
	lease := filepath.Join(runlease.DefaultRoot(), r.cfg.owner, spec.RunID)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		// The run's lease directory holds one file per holder; gone, nobody holds it.
		if ents, err := os.ReadDir(lease); err == nil && len(ents) > 0 {
			if err := os.RemoveAll(lease); err != nil {
				t.Fatal(err)
			}
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the claimed run never held its lease: %v", err)
		}
	}
	var found []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && len(found) == 0; time.Sleep(50 * time.Millisecond) {
		rep, err := r.Sweep(context.Background(), port.SweepOptions{RunID: spec.RunID, DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		found = rep.Removed
	}
	if len(found) == 0 {
		t.Error("a dry-run Sweep of the claimed run found nothing")
	}
	rep, err := r.Sweep(context.Background(), port.SweepOptions{RunID: spec.RunID})
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("sweep: %v %v", err, rep.Errors)
	}
	// Removed under it, the run ends as removed (as a cold run would), long before
	// its 30 s sleep.
	if o := <-done; !errors.Is(o.err, port.ErrRemoved) {
		t.Errorf("the swept run: %v %+v; want port.ErrRemoved", o.err, o.res)
	}
	if left, err := poolLeftovers(r, cli)(context.Background(), spec.RunID); err != nil || len(left) > 0 {
		t.Errorf("after the sweep: %v %v", left, err)
	}
}

// TestPoolEnvAndWorkdir: a pooled run gets the image's environment merged with the
// run's (the library's variables winning) and starts in the workspace.
func TestPoolEnvAndWorkdir(t *testing.T) {
	r, _, image := poolEnv(t, testenv.Owner("pool-env"))
	spec := suiteSpec(image)
	spec.WorkspaceDir = t.TempDir()
	p, err := r.NewPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, p)
	spec.RunID = sandboxtest.RunID("pool-env")
	spec.Argv = []string{"/agent", "env"}
	spec.Env = map[string]string{"ONLY": "this", "HOSTNAME": "spoofed"}
	res, err := p.RunOnce(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	env := string(res.Stdout)
	for _, want := range []string{"ONLY=this", "HOSTNAME=sandbox"} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("env lacks %s:\n%s", want, env)
		}
	}
	if st := p.Stats(); st.Warm != 1 {
		t.Errorf("not warm: %+v", st)
	}
}

// TestPoolRunsThenCleanup: many pooled runs in a row (POOL_RUNS, default 100 here;
// 1000 with POOL_RUNS=1000), every one warm, then nothing of the owner left once the
// pool is closed. About 0.15 s per run.
func TestPoolRunsThenCleanup(t *testing.T) {
	if testing.Short() {
		t.Skip("long: -short")
	}
	n := testenv.Count("POOL_RUNS", 100)
	r, cli, image := poolEnv(t, testenv.Owner("pool-many"))
	spec := suiteSpec(image)
	spec.WorkspaceDir = "/"
	p, err := r.NewPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 4, RefillConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ws := t.TempDir()
	for i := range n {
		for p.Stats().Ready == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		spec.RunID = sandboxtest.RunID("pool-many")
		spec.WorkspaceDir = ws
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
	if left := ownedLeftovers(t, r, cli); len(left) > 0 {
		t.Errorf("after %d pooled runs and Close: %v", n, left)
	}
}

// TestPoolClosedWithRunner: closing the runner closes its pools and removes every
// ready sandbox; a pool cannot be made on a closed runner.
func TestPoolClosedWithRunner(t *testing.T) {
	r, cli, image := poolEnv(t, testenv.Owner("pool-close"))
	p, err := r.NewPool(context.Background(), port.TemplateOf(suiteSpec(image)), port.PoolOptions{Size: 3})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, p)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if left := ownedLeftovers(t, r, cli); len(left) > 0 {
		t.Errorf("after the runner closed: %v", left)
	}
	if _, err := r.NewPool(context.Background(), port.TemplateOf(suiteSpec(image)), port.PoolOptions{Size: 1}); !errors.Is(err, port.ErrUnavailable) {
		t.Errorf("NewPool on a closed runner: %v", err)
	}
}

// TestPoolSweepAfterCrash kills a host mid pooled run; Sweep of the run removes its
// sandbox and slot directory, and a Sweep of the owner the rest of the dead pool.
func TestPoolSweepAfterCrash(t *testing.T) {
	testenv.Need(t, "root", os.Getuid() == 0, "warm pools mount the runs' directories")
	cli, image := dockerEnv(t)
	dir := t.TempDir()
	t.Setenv(poolCrashEnv, dir)
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("crash-pool")), WithPoolDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestSweepAfterCrash(t, sandboxtest.CrashHarness{Sweeper: r, Leftovers: poolLeftovers(r, cli), Image: image, Bridge: testenv.Bridge(t)})
	rep, err := r.Sweep(context.Background(), port.SweepOptions{})
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("sweep: %v %v", err, rep.Errors)
	}
	t.Logf("the rest of the dead pool: %v", rep.Removed)
	if left := ownedLeftovers(t, r, cli); len(left) > 0 {
		t.Errorf("after the sweeps: %v", left)
	}
}

// poolCrashEnv makes TestMain's crash child serve its run from a warm pool whose slot
// directories are under the variable's value.
const poolCrashEnv = "AGENTSANDBOX_TEST_POOL_CRASH"

// crashPool is the crash child's runner when poolCrashEnv is set: a full pool of the
// crash run's shape.
func crashPool(bridge string) (port.SandboxRunner, error) {
	r, err := NewRunner(WithOwner(testenv.Owner("crash-pool")), WithBridge(bridge), WithPoolDir(os.Getenv(poolCrashEnv)))
	if err != nil {
		return nil, err
	}
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
	if _, err := NewRunner(WithPoolDir("relative")); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("relative pool dir: %v", err)
	}
}

// TestPoolDropsDeadStub: a ready sandbox whose stub was killed before its claim is
// dropped, and the run still completes.
func TestPoolDropsDeadStub(t *testing.T) {
	r, cli, image := poolEnv(t, testenv.Owner("pool-dead"))
	ctx := context.Background()
	spec := suiteSpec(image)
	p, err := r.NewPool(ctx, port.TemplateOf(spec), port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, p)
	s := <-p.ready
	if _, err := cli.ContainerKill(ctx, s.id, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		t.Fatal(err)
	}
	// Wait for what the pool watches: the exit on the slot's wait channel.
	for len(s.exit) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	p.ready <- s
	spec.RunID = sandboxtest.RunID("pool-dead")
	spec.Argv = []string{"/agent", "echo", "out", "err"}
	res, err := p.RunOnce(ctx, spec)
	if err != nil || string(res.Stdout) != "out" {
		t.Fatalf("%v: %+v", err, res)
	}
	if st := p.Stats(); st.Failed != 1 {
		t.Errorf("the dead stub was not dropped: %+v", st)
	}
}

func TestPooledRunName(t *testing.T) {
	for name, want := range map[string]bool{
		"/agentsandbox-run-1-0a1b2c3d":    true,
		"agentsandbox-run-1-0a1b2c3d":     true,
		"/agentsandbox-run-1-x-0a1b2c3d":  false,
		"/agentsandbox-run-10-0a1b2c3d":   false,
		"/agentsandbox-pool-0a1b2c3d4e5f": false,
		"/other-run-1-0a1b2c3d":           false,
	} {
		if got := pooledRun(name, "run-1"); got != want {
			t.Errorf("pooledRun(%q) = %v", name, got)
		}
	}
}

// TestPoolForgedExitRecord: records the agent forges are its output and leave its
// exit code alone (sandboxtest.TestPoolForgedExitRecord). About 2 s.
func TestPoolForgedExitRecord(t *testing.T) {
	r, _, image := poolEnv(t, testenv.Owner("pool-forge"))
	sandboxtest.TestPoolForgedExitRecord(t, r, image)
}

// TestPoolStubUnreadable: the agent cannot read the claim or its nonce out of the stub
// (sandboxtest.TestPoolStubUnreadable). About 1 s.
func TestPoolStubUnreadable(t *testing.T) {
	r, _, image := poolEnv(t, testenv.Owner("pool-undump"))
	sandboxtest.TestPoolStubUnreadable(t, r, image)
}
