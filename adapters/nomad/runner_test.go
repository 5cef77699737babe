package nomad

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/internal/testsupport/nomadtest"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv/testsweep"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	sandboxtest.CrashChildMain(func(bridge string) (port.SandboxRunner, error) {
		return NewRunner(WithAddress(os.Getenv(nomadtest.AddrEnv)), WithOwner(os.Getenv(ownerEnv)), WithBridge(bridge), WithInit(os.Getenv(initEnv)))
	})
	testsweep.DeadOwners() // the sandboxes a dead earlier run left in Docker
	os.Exit(nomadtest.Main(m))
}

const (
	ownerEnv = "SANDBOX_NOMAD_TEST_OWNER"
	initEnv  = "SANDBOX_NOMAD_TEST_INIT"
)

// env is what every test of the package shares: the cluster, the images loaded into
// the clients' Docker engine and the binaries on their (shared) file system.
type env struct {
	cluster *nomadtest.Cluster
	owner   string
	image   string // probe agent
	proxy   string // sidecar proxy image
	bridge  string
	init    string
}

var (
	setupOnce sync.Once
	shared    env
	setupErr  error
)

func setup(t testing.TB) env {
	t.Helper()
	c := nomadtest.Shared(t)
	testenv.NeedCommand(t, "docker", "docker")
	bridgePath := testenv.Bridge(t)
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		e := env{cluster: c, owner: testenv.Owner("nomadtest"), bridge: bridgePath}
		d, err := docker.NewRunner()
		if err != nil {
			setupErr = err
			return
		}
		defer d.Close()
		ref, archive, err := sandboxtest.ProbeImage(ctx)
		if err == nil {
			_, err = d.LoadImage(ctx, bytes.NewReader(archive))
		}
		if err != nil {
			setupErr = fmt.Errorf("probe image: %w", err)
			return
		}
		e.image = ref
		ref, archive, err = ProxyImage(ctx)
		if err == nil {
			_, err = d.LoadImage(ctx, bytes.NewReader(archive))
		}
		if err != nil {
			setupErr = fmt.Errorf("proxy image: %w", err)
			return
		}
		e.proxy = ref
		if e.init, err = BuildInit(ctx, filepath.Join(os.TempDir(), "agentsandbox-nomad-init-test")); err != nil {
			setupErr = err
			return
		}
		shared = e
		_ = os.Setenv(ownerEnv, e.owner)
		_ = os.Setenv(initEnv, e.init)
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return shared
}

func (e env) runner(t testing.TB, opts ...Option) *Runner {
	t.Helper()
	base := []Option{WithAddress(e.cluster.Addr), WithOwner(e.owner), WithBridge(e.bridge), WithInit(e.init), WithProxyImage(e.proxy)}
	r, err := NewRunner(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// leftovers lists what the cluster and the Docker engine still hold for a run: jobs
// (by meta), allocations not yet collected, proxy variables and containers (by label).
func (e env) leftovers(r *Runner) func(ctx context.Context, runID string) ([]string, error) {
	return func(ctx context.Context, runID string) ([]string, error) {
		var left []string
		jobs, _, err := r.api.Jobs().ListOptions(withMeta, (&api.QueryOptions{Prefix: jobPrefix + runID + "-"}).WithContext(ctx))
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if j.Meta[port.LabelRunID] == runID && j.Meta[port.LabelOwner] == e.owner {
				left = append(left, "job:"+j.ID+"("+j.Status+")")
			}
		}
		vars, _, err := r.api.Variables().PrefixList("nomad/jobs/"+jobPrefix+runID+"-", (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return nil, err
		}
		for _, v := range vars {
			full, _, err := r.api.Variables().Read(v.Path, nil)
			if err == nil && full.Items["run_id"] == runID {
				left = append(left, "variable:"+v.Path)
			}
		}
		out, err := exec.CommandContext(ctx, "docker", "ps", "-a", "--format", "{{.ID}} {{.Status}}",
			"--filter", "label="+port.LabelOwner+"="+e.owner, "--filter", "label="+port.LabelRunID+"="+runID).Output()
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				left = append(left, "container:"+l)
			}
		}
		return left, nil
	}
}

func TestRunnerConformance(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: r, Image: e.image, Leftovers: e.leftovers(r)})
}

func TestProxyConformance(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	left := e.leftovers(r)
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{
		Manager: r, Runner: r, Image: e.image,
		KillEndsSandbox: true,
		Kill: func(ctx context.Context, p port.Proxy) error {
			// The sidecar is killed where it runs, mid-run, as a crash would.
			return p.(*Proxy).kill(ctx)
		},
		Leftovers: func(ctx context.Context, runID string) ([]string, error) {
			l, err := left(ctx, runID)
			r.mu.Lock()
			for tok, p := range r.proxies {
				if p.spec.RunID == runID {
					l = append(l, "proxy:"+tok)
				}
			}
			r.mu.Unlock()
			return l, err
		},
	})
}

func TestSweepAfterCrash(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	sandboxtest.TestSweepAfterCrash(t, sandboxtest.CrashHarness{Sweeper: r, Leftovers: e.leftovers(r), Image: e.image, Bridge: e.bridge})
}

func TestDeadlineWithoutHost(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	sandboxtest.TestDeadlineWithoutHost(t, sandboxtest.CrashHarness{
		Sweeper: r, Leftovers: e.leftovers(r), Image: e.image, Bridge: e.bridge,
		Running: func(ctx context.Context, runID string) (bool, error) {
			out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "status=running", "--filter", "status=created",
				"--filter", "label="+port.LabelOwner+"="+e.owner, "--filter", "label="+port.LabelRunID+"="+runID).Output()
			return len(bytes.TrimSpace(out)) > 0, err
		},
	})
}

// TestSweepGraceDryRunOwner plays a host that died after submitting a job: a Sweep
// keeps it within the grace period, only reports it in a dry run, never touches
// another owner's job, and then removes it with its allocation and containers.
func TestSweepGraceDryRunOwner(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	other := e.runner(t, WithOwner(e.owner+"-other"))
	ctx := context.Background()
	submit := func(r *Runner, runID string) string {
		spec := port.RunSpec{RunID: runID, Image: e.image, Argv: []string{"/agent", "sleep", "600"}}.WithDefaults()
		created := time.Now()
		js := jobSpec{id: jobID(runID), meta: meta(r.cfg.owner, runID, created), created: created}
		if _, _, err := r.api.Jobs().Register(r.buildJob(spec, js), nil); err != nil {
			t.Fatal(err)
		}
		return js.id
	}
	mine, theirs := sandboxtest.RunID("swept"), sandboxtest.RunID("kept")
	submit(r, mine)
	theirJob := submit(other, theirs)
	defer func() { _ = other.remove(ctx, theirJob, nil, false) }()
	left := e.leftovers(r)
	// Wait until the sandbox runs, as it would have when the host died.
	deadline := time.Now().Add(time.Minute)
	for {
		l, _ := left(ctx, mine)
		if len(l) >= 2 { // the job and its container
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never started: %v", l)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rep, err := r.Sweep(ctx, port.SweepOptions{OlderThan: time.Hour})
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("a sweep within the grace period removed %v (%v)", rep.Removed, err)
	}
	rep, err = r.Sweep(ctx, port.SweepOptions{DryRun: true})
	if err != nil || len(rep.Removed) != 1 || !strings.Contains(rep.Removed[0], mine) {
		t.Fatalf("dry run = %v (%v), want only the job of %s", rep.Removed, err, mine)
	}
	if l, _ := left(ctx, mine); len(l) < 2 {
		t.Fatalf("the dry run removed something: %v", l)
	}
	rep, err = r.Sweep(ctx, port.SweepOptions{})
	if err != nil || len(rep.Errors) > 0 || len(rep.Removed) != 1 {
		t.Fatalf("sweep = %+v (%v)", rep, err)
	}
	if l, err := left(ctx, mine); err != nil || len(l) > 0 {
		t.Errorf("after the sweep: %v %v", l, err)
	}
	if j, _, err := r.api.Jobs().Info(theirJob, nil); err != nil || *j.Status == "dead" {
		t.Errorf("the sweep touched another owner's job: %v", err)
	}
	if _, err := r.Sweep(ctx, port.SweepOptions{RunID: "../x"}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a bad run id: %v", err)
	}
}

// TestManyRunsAcrossClients runs 100 sandboxes (SANDBOX_NOMAD_RUNS), 8 at a time,
// and requires every one to succeed, both clients to have run some, and nothing to be
// left in Nomad or Docker afterwards.
func TestManyRunsAcrossClients(t *testing.T) {
	e := setup(t)
	r := e.runner(t, WithLogger(slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	var mu sync.Mutex
	nodes := map[string]int{}
	r.observe = func(a *api.Allocation) {
		mu.Lock()
		nodes[a.NodeName]++
		mu.Unlock()
	}
	n := testenv.Count("SANDBOX_NOMAD_RUNS", 100)
	const par = 8
	start := time.Now()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var failures []string
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			want := fmt.Sprintf("run-%d", i)
			res, err := r.RunOnce(context.Background(), port.RunSpec{
				RunID: sandboxtest.RunID("many"), Image: e.image, Argv: []string{"/agent", "echo", want, "err-" + want},
				Limits: port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 64 << 20},
			})
			if err != nil || string(res.Stdout) != want || string(res.Stderr) != "err-"+want || res.ExitCode != 0 {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s: err=%v res=%+v", want, err, res))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d runs, %d at a time, in %v (%.1f runs/s); per node: %v", n, par, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), nodes)
	if len(failures) > 0 {
		t.Fatalf("%d of %d runs failed:\n%s", len(failures), n, strings.Join(failures, "\n"))
	}
	if len(nodes) != len(e.cluster.NodeNames) {
		t.Errorf("the runs went to %v, want all of %v", nodes, e.cluster.NodeNames)
	}
	for _, name := range e.cluster.NodeNames {
		if nodes[name] < n/10 {
			t.Errorf("node %s ran %d of %d runs: not spread", name, nodes[name], n)
		}
	}
	ctx := context.Background()
	jobs, _, err := r.api.Jobs().List(&api.QueryOptions{Prefix: jobPrefix + "many-"})
	if err != nil || len(jobs) > 0 {
		t.Errorf("jobs left: %d (%v)", len(jobs), err)
	}
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label="+port.LabelOwner+"="+e.owner).Output()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("containers left: %q (%v)", out, err)
	}
	allocs, _, err := r.api.Allocations().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range allocs {
		if strings.HasPrefix(a.JobID, jobPrefix+"many-") && !(a.ClientStatus == "complete" || a.ClientStatus == "failed") {
			t.Errorf("allocation %s of %s is %s", a.ID, a.JobID, a.ClientStatus)
		}
	}
	// The clients collected every allocation: no directory is left on the nodes.
	for _, name := range e.cluster.NodeNames {
		ents, err := os.ReadDir(filepath.Join(e.cluster.Dir(), name, "alloc"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, d := range ents {
			if a, _, err := r.api.Allocations().Info(d.Name(), nil); err == nil && strings.HasPrefix(a.JobID, jobPrefix+"many-") {
				t.Errorf("node %s still holds the directory of allocation %s", name, d.Name())
			}
		}
	}
}

// tlog writes log lines to the test's log.
type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestSocketDirectoryBelongsToTheProxy: Nomad mounts the allocation's shared directory
// read-write in every task; the socket's directory in it is the proxy's, and the
// sandbox can neither write there nor, through /llm-sock, anywhere near the socket.
func TestSocketDirectoryBelongsToTheProxy(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	p, err := r.Start(context.Background(), port.ProxySpec{RunID: "sockdir", Upstream: "http://127.0.0.1:1", APIKey: "k",
		Attribution: port.Attribution{BillingAccountID: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	sock := p.Socket()
	for _, target := range []string{"/alloc/" + sockSubdir + "/planted", port.LLMSocketDir + "/planted"} {
		res, err := r.RunOnce(context.Background(), port.RunSpec{RunID: sandboxtest.RunID("sockdir"), Image: e.image, LLM: &sock,
			Argv: []string{"/agent", "write", target, "x"}})
		if err != nil || res == nil || res.ExitCode != 4 {
			t.Errorf("writing %s: %+v, %v", target, res, err)
		}
	}
}
