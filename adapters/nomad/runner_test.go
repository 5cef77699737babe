package nomad

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/internal/nomadtest"
	"github.com/agentsandbox/sandbox/internal/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	sandboxtest.CrashChildMain(func(bridge string) (port.SandboxRunner, error) {
		return NewRunner(WithAddress(os.Getenv(nomadtest.AddrEnv)), WithOwner(os.Getenv(ownerEnv)), WithBridge(bridge), WithInit(os.Getenv(initEnv)))
	})
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
		e := env{cluster: c, owner: "nomadtest-" + randHex(4), bridge: bridgePath}
		d, err := docker.NewRunner()
		if err != nil {
			setupErr = err
			return
		}
		defer d.Close()
		ref, archive, err := sandboxtest.ProbeImage(ctx)
		if err == nil {
			err = d.LoadImage(ctx, bytes.NewReader(archive))
		}
		if err != nil {
			setupErr = fmt.Errorf("probe image: %w", err)
			return
		}
		e.image = ref
		ref, archive, err = ProxyImage(ctx)
		if err == nil {
			err = d.LoadImage(ctx, bytes.NewReader(archive))
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
		jobs, _, err := r.api.Jobs().List((&api.QueryOptions{Prefix: jobPrefix + runID + "-"}).WithContext(ctx))
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
		Budget: true, Attestation: true, BodyPolicy: true,
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
