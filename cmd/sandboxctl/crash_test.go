package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// crashHostEnv carries the crash host's configuration (JSON) to the child process
// TestSweepAfterHostCrash starts.
const crashHostEnv = "SANDBOXCTL_TEST_CRASH_HOST"

// crashConfig is what the crash host is given.
type crashConfig struct {
	Owner, Dir, Bridge, Image, Nginx, Namespace string
}

func (c crashConfig) sessionDir() string   { return filepath.Join(c.Dir, "sessions") }
func (c crashConfig) poolDir() string      { return filepath.Join(c.Dir, "pool") }
func (c crashConfig) proxyDir() string     { return filepath.Join(c.Dir, "proxy") }
func (c crashConfig) workspaceDir() string { return filepath.Join(c.Dir, "ws") }

func TestMain(m *testing.M) {
	if cfg := os.Getenv(crashHostEnv); cfg != "" {
		crashHost(cfg)
		return
	}
	os.Exit(m.Run())
}

// crashHost is a host with everything live that a host can hold, on both runtimes: a
// session through the facade (its in-process proxy's directory and socket, its
// NewWorkspace workspace with the prompt, its session directory), a warm pool with a
// ready sandbox, an nginx proxy, and their run leases. It says "ready" on stdout and
// waits to be killed.
func crashHost(raw string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash host:", err)
		os.Exit(3)
	}
	var c crashConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fail(err)
	}
	ctx := context.Background()
	dr, err := docker.NewRunner(docker.WithOwner(c.Owner), docker.WithBridge(c.Bridge), docker.WithSessionDir(c.sessionDir()), docker.WithPoolDir(c.poolDir()))
	if err != nil {
		fail(err)
	}
	cr, err := containerd.NewRunner(containerd.WithOwner(c.Owner), containerd.WithBridge(c.Bridge), containerd.WithNamespace(c.Namespace),
		containerd.WithSessionDir(c.sessionDir()), containerd.WithPoolDir(c.poolDir()))
	if err != nil {
		fail(err)
	}
	fake := litellmtest.NewServer()
	proxies, err := inprocproxy.NewManager(inprocproxy.WithOwner(c.Owner), inprocproxy.WithBaseDir(c.proxyDir()), inprocproxy.WithSandboxUID(1001))
	if err != nil {
		fail(err)
	}
	nginx, err := docker.NewProxyManager(docker.WithOwner(c.Owner), docker.WithProxyBaseDir(c.proxyDir()), docker.WithProxyImage(c.Nginx), docker.WithUnfilteredBodies())
	if err != nil {
		fail(err)
	}
	if _, err := nginx.Start(ctx, port.ProxySpec{RunID: sandboxtest.RunID("crash-nginx"), Upstream: fake.URL, APIKey: fake.MasterKey(), Attribution: port.Attribution{BillingAccountID: "acct"}}); err != nil {
		fail(fmt.Errorf("nginx proxy: %w", err))
	}
	llm := sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: fake.URL, APIKey: fake.MasterKey()})
	for name, r := range map[string]port.SandboxRunner{"docker": dr, "containerd": cr} {
		sb, err := sandbox.New(r, llm)
		if err != nil {
			fail(err)
		}
		ws, err := sandbox.NewWorkspace(c.workspaceDir(), port.DefaultUser, sandbox.WithWorkspaceOwner(c.Owner))
		if err != nil {
			fail(err)
		}
		if _, err := sb.Start(ctx, sandbox.SessionRequest{Request: sandbox.Request{
			Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("crash-" + name), Image: c.Image,
			Argv: []string{"/agent", "sleep", "600"}, WorkspaceDir: ws.Dir(),
			Messages:    []sandbox.Message{{Role: "user", Content: "the prompt a dead host leaves in its workspace"}},
			Limits:      port.Limits{Timeout: 10 * time.Minute},
			Attribution: port.Attribution{BillingAccountID: "acct"},
		}}); err != nil {
			fail(fmt.Errorf("%s session: %w", name, err))
		}
	}
	tmpl := port.TemplateOf(port.RunSpec{Image: c.Image, Limits: port.Limits{MemoryBytes: 64 << 20}}.WithDefaults())
	dp, err := dr.NewPool(ctx, tmpl, port.PoolOptions{Size: 1})
	if err != nil {
		fail(err)
	}
	cp, err := cr.NewPool(ctx, tmpl, port.PoolOptions{Size: 1})
	if err != nil {
		fail(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); dp.Stats().Ready < 1 || cp.Stats().Ready < 1; {
		if time.Now().After(deadline) {
			fail(fmt.Errorf("pools never ready: docker %+v, containerd %+v", dp.Stats(), cp.Stats()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("ready")
	select {}
}

// TestSweepAfterHostCrash kills a host (a child process) holding sessions, warm pools,
// proxies (in-process and nginx) and workspaces on Docker and containerd, then runs one
// `sandboxctl sweep --dry-run` and one `sandboxctl sweep` for its owner: the dry run
// lists exactly what the sweep removes, and nothing of the owner remains. About 30 s.
func TestSweepAfterHostCrash(t *testing.T) {
	needRuntimes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := testenv.ShortDir(t, "ctlx")
	c := crashConfig{Owner: testenv.Owner("ctlcrash"), Dir: dir, Bridge: testenv.Bridge(t), Namespace: "agentsandbox-test"}
	for _, d := range []string{c.sessionDir(), c.poolDir(), c.proxyDir(), c.workspaceDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Image = ref
	cli, err := dockerClient("")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	nref, narchive, err := testimages.NginxArchive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := testimages.EnsureDocker(ctx, cli, nref, narchive); err != nil {
		t.Fatal(err)
	}
	c.Nginx = nref
	cr, err := containerd.NewRunner(containerd.WithNamespace(c.Namespace), containerd.WithOwner(c.Owner))
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	if _, err := cr.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--owner", c.Owner, "--namespace", c.Namespace, "--session-dir", c.sessionDir(), "--pool-dir", c.poolDir(),
		"--proxy-dir", c.proxyDir(), "--workspace-dir", c.workspaceDir(), "--older-than", "0s", "--json"}
	// Whatever happens, nothing of this owner is left.
	defer ctl(t, append([]string{"sweep"}, flags...)...)

	cfg, _ := json.Marshal(c)
	host := exec.Command(os.Args[0], "-test.run", "^$")
	host.Env = append(os.Environ(), crashHostEnv+"="+string(cfg))
	var hostErr bytes.Buffer
	host.Stderr = &hostErr
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			ok = ok || sc.Text() == "ready"
			if ok {
				break
			}
		}
		ready <- ok
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = host.Wait()
			t.Fatalf("the crash host exited: %s", hostErr.String())
		}
	case <-time.After(3 * time.Minute):
		_ = host.Process.Kill()
		_ = host.Wait()
		t.Fatalf("the crash host was never ready: %s", hostErr.String())
	}

	// ps shows the pools' ready sandboxes as such.
	code, psOut, _ := ctl(t, "ps", "--json", "--owner", c.Owner, "--namespace", c.Namespace)
	var es []entry
	if err := json.Unmarshal([]byte(psOut), &es); err != nil || code != exitOK {
		t.Fatalf("ps: exit %d %s", code, psOut)
	}
	kinds := map[string]int{}
	for _, e := range es {
		kinds[e.Runtime+"/"+e.Kind]++
	}
	for _, k := range []string{"docker/pool", "containerd/pool", "docker/session", "containerd/session", "docker/proxy"} {
		if kinds[k] != 1 {
			t.Errorf("ps shows %d of %s: %v", kinds[k], k, kinds)
		}
	}

	// The host dies without warning.
	if err := host.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = host.Wait()

	sweep := func(dry bool) []string {
		t.Helper()
		args := append([]string{"sweep"}, flags...)
		if dry {
			args = append(args, "--dry-run")
		}
		code, out, errs := ctl(t, args...)
		var reps []sweepReport
		if err := json.Unmarshal([]byte(out), &reps); err != nil || code != exitOK {
			t.Fatalf("sweep (dry run %v): exit %d %s %s", dry, code, out, errs)
		}
		var items []string
		for _, r := range reps {
			for _, x := range r.Removed {
				items = append(items, r.Runtime+" "+x)
			}
		}
		sort.Strings(items)
		return items
	}
	listed := sweep(true)
	removed := sweep(false)
	t.Logf("the sweep removed %d items:\n%s", len(removed), strings.Join(removed, "\n"))
	if !slices.Equal(listed, removed) {
		t.Errorf("the dry run listed\n%s\nthe sweep removed\n%s", strings.Join(listed, "\n"), strings.Join(removed, "\n"))
	}
	// Each kind of thing the host held was found.
	for _, want := range []string{"docker container:", "docker dir:" + c.sessionDir(), "docker dir:" + c.poolDir(),
		"containerd container:", "containerd dir:" + c.sessionDir(), "containerd dir:" + c.poolDir(),
		"inproc-proxy dir:" + c.proxyDir(), "docker-nginx dir:" + c.proxyDir(), "workspaces workspace:" + c.workspaceDir(), "runlease:" + c.Owner + "/"} {
		if !slices.ContainsFunc(removed, func(x string) bool { return strings.HasPrefix(x, want) || strings.Contains(x, " "+want) }) {
			t.Errorf("the sweep removed nothing like %q", want)
		}
	}
	if left := ownerLeftovers(ctx, t, cli, c); len(left) > 0 {
		t.Errorf("after one sweep, the owner still has:\n%s", strings.Join(left, "\n"))
	}
	if again := sweep(true); len(again) > 0 {
		t.Errorf("a second dry run still lists %v", again)
	}
}

// ownerLeftovers lists everything of c.Owner the runtimes and c's directories hold.
func ownerLeftovers(ctx context.Context, t *testing.T, cli *client.Client, c crashConfig) []string {
	t.Helper()
	var left []string
	f := client.Filters{}.Add("label", port.LabelOwner+"="+c.Owner)
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range cs.Items {
		left = append(left, "docker container "+x.ID+" "+strings.Join(x.Names, ","))
	}
	vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs.Items {
		left = append(left, "docker volume "+v.Name)
	}
	cc, err := ctrd.New("/run/containerd/containerd.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	nctx := namespaces.WithNamespace(ctx, c.Namespace)
	filter := `labels."` + port.LabelOwner + `"==` + strconv.Quote(c.Owner)
	ccs, err := cc.Containers(nctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ccs {
		left = append(left, "containerd container "+x.ID())
	}
	err = cc.SnapshotService(containerd.DefaultSnapshotter).Walk(nctx, func(_ context.Context, i snapshots.Info) error {
		left = append(left, "containerd snapshot "+i.Name)
		return nil
	}, filter)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := cc.LeasesService().List(nctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		left = append(left, "containerd lease "+l.ID)
	}
	// Directories: whatever the owner's parts hold (the parents may stay).
	for _, d := range []string{c.sessionDir(), filepath.Join(c.poolDir(), "docker", c.Owner), filepath.Join(c.poolDir(), c.Namespace, c.Owner),
		filepath.Join(c.proxyDir(), c.Owner), c.workspaceDir(), filepath.Join(runlease.DefaultRoot(), c.Owner)} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			left = append(left, "file "+filepath.Join(d, e.Name()))
		}
	}
	return left
}
