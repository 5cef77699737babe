package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/docker"
	api "github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/runtoken"
)

// BenchmarkProxydVsNginx puts N runs, each with its own nginx proxy container
// (adapters/docker), beside N runs registered in one shared daemon (its own
// process, cmd/sandbox-proxyd), in one run:
//
//	SANDBOX_BENCH_NGINX_RUNS=64 go test -run '^$' -bench ProxydVsNginx -benchtime 2000x -timeout 30m ./integration/
//
// Memory per run is proportional set size (PSS, /proc/PID/smaps_rollup): for
// nginx, the container's processes (master and worker) and, reported apart,
// its containerd shim; for the daemon, its growth from no runs to N runs, each
// after one call. Latency: every iteration makes one non-streamed call
// directly, one through the next nginx run and one through the next daemon
// run. Containers are started one at a time and the count stops early, below
// N, when the host's available memory falls under 4 GiB or a start takes over
// 30 s (a shared host must keep working); the count reached is reported.
func BenchmarkProxydVsNginx(b *testing.B) {
	n := 16
	if v := os.Getenv("SANDBOX_BENCH_NGINX_RUNS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1024 {
			b.Fatalf("SANDBOX_BENCH_NGINX_RUNS=%q: want 1 to 1024", v)
		}
	}
	ctx := context.Background()
	cli := dockerClient(b)
	ref, archive, err := testimages.NginxArchive(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		b.Fatal(err)
	}
	owner := testenv.Owner("pxdbench")
	base, err := os.MkdirTemp("", "pxdbench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	nm, err := docker.NewProxyManager(docker.WithClient(cli), docker.WithOwner(owner), docker.WithProxyImage(ref),
		docker.WithProxyBaseDir(base), docker.WithUnfilteredBodies())
	if err != nil {
		b.Fatal(err)
	}
	// Whatever happens, the containers go: each run's Stop, then a sweep by owner.
	var nginx []port.Proxy
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for _, p := range nginx {
			wg.Add(1)
			sem <- struct{}{}
			go func() { defer wg.Done(); defer func() { <-sem }(); _, _ = p.Stop(sctx) }()
		}
		wg.Wait()
		if rep, err := nm.Sweep(sctx, port.SweepOptions{}); err != nil || len(rep.Removed) > 0 {
			b.Logf("sweep after the benchmark: %+v %v", rep, err)
		}
	}()
	fake := litellmtest.NewServer()
	defer fake.Close()
	spec := func(i int, kind string) port.ProxySpec {
		return port.ProxySpec{RunID: fmt.Sprintf("%s-%s-%d", owner, kind, i), Upstream: fake.URL, APIKey: fake.MasterKey(),
			Attribution: port.Attribution{BillingAccountID: "acct-bench"}}
	}

	// nginx containers, one at a time, within the safety bound.
	var nginxC []*http.Client
	var startTimes []time.Duration
	for i := 0; i < n; i++ {
		if avail := memAvailable(); avail < 4<<30 {
			b.Logf("stopping at %d nginx runs: %d MiB available", i, avail>>20)
			break
		}
		t0 := time.Now()
		p, err := nm.Start(ctx, spec(i, "nginx"))
		if err != nil {
			b.Fatalf("nginx run %d: %v", i, err)
		}
		nginx = append(nginx, p)
		d := time.Since(t0)
		startTimes = append(startTimes, d)
		nginxC = append(nginxC, benchUnixClient(p.Socket().HostDir+"/"+port.LLMSocketName, ""))
		if d > 30*time.Second {
			b.Logf("stopping at %d nginx runs: the last start took %v", i+1, d)
			break
		}
	}
	k := len(nginx)

	// The daemon, with the same number of runs.
	d := startProxyd(b, "-v=false") // no debug line per call
	pid := d.cmd.Process.Pid
	time.Sleep(500 * time.Millisecond)
	idle := pss(pid)
	var daemonC []*http.Client
	var regs []string
	for i := 0; i < k; i++ {
		reg, err := d.client.Register(ctx, registerFor(spec(i, "pxd")))
		if err != nil {
			b.Fatal(err)
		}
		regs = append(regs, reg.ID)
		daemonC = append(daemonC, benchUnixClient(reg.SocketPath, reg.Token))
	}
	defer func() {
		for _, id := range regs {
			_, _ = d.client.Deregister(context.WithoutCancel(ctx), id, 0)
		}
	}()
	url := "http://proxy/v1/chat/completions"
	for i := 0; i < k; i++ {
		if _, err := benchCallOnce(nginxC[i], url, ""); err != nil {
			b.Fatalf("nginx run %d: %v", i, err)
		}
		if _, err := benchCallOnce(daemonC[i], url, ""); err != nil {
			b.Fatalf("daemon run %d: %v", i, err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	daemonPSS := pss(pid) - idle
	nginxPSS, shimPSS, err := containerPSS(ctx, cli, owner)
	if err != nil {
		b.Fatal(err)
	}

	direct := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	var dl, nl, pl []time.Duration
	i := 0
	for b.Loop() {
		for _, s := range []struct {
			c    *http.Client
			url  string
			key  string
			dest *[]time.Duration
		}{{direct, fake.URL + "/v1/chat/completions", fake.MasterKey(), &dl}, {nginxC[i%k], url, "", &nl}, {daemonC[i%k], url, "", &pl}} {
			t, err := benchCallOnce(s.c, s.url, s.key)
			if err != nil {
				b.Fatal(err)
			}
			*s.dest = append(*s.dest, t)
		}
		i++
	}
	b.ReportMetric(float64(k), "runs")
	b.ReportMetric(float64(benchutil.Quantile(startTimes, .5))/1e6, "nginx-start-p50-ms")
	b.ReportMetric(float64(nginxPSS)/float64(k)/1024, "nginx-KiB/run")
	b.ReportMetric(float64(shimPSS)/float64(k)/1024, "nginx-shim-KiB/run")
	b.ReportMetric(float64(daemonPSS)/float64(k)/1024, "daemon-KiB/run")
	b.ReportMetric(float64(idle)/1024, "daemon-idle-KiB")
	if daemonPSS > 0 {
		b.ReportMetric(float64(nginxPSS+shimPSS)/float64(daemonPSS), "mem-nginx+shim/daemon")
	}
	d50 := benchutil.Report(b, "direct", dl)
	n50 := benchutil.Report(b, "nginx", nl)
	p50 := benchutil.Report(b, "daemon", pl)
	b.ReportMetric(float64(n50-d50)/1e3, "nginx-added-p50-µs")
	b.ReportMetric(float64(p50-d50)/1e3, "daemon-added-p50-µs")
	benchutil.Ratio(b, "added-p50-daemon/nginx", p50-d50, n50-d50)
	b.ReportMetric(0, "ns/op")
}

func registerFor(s port.ProxySpec) api.RegisterRequest {
	return api.RegisterRequest{RunID: s.RunID, Upstream: s.Upstream, APIKey: s.APIKey, Attribution: proxydapi.Attribution(s.Attribution)}
}

// benchTokenTransport adds the run token as the bridge does.
type benchTokenTransport struct {
	base  http.RoundTripper
	token string
}

func (t benchTokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set(runtoken.Header, t.token)
	}
	return t.base.RoundTrip(r)
}

func benchUnixClient(sock, token string) *http.Client {
	return &http.Client{Transport: benchTokenTransport{token: token, base: &http.Transport{
		DisableCompression: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}}
}

func benchCallOnce(c *http.Client, url, key string) (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:bench"}]}`))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(t0), nil
}

// memAvailable is the host's MemAvailable in bytes.
func memAvailable() int64 {
	return meminfoKiB("/proc/meminfo", "MemAvailable:") << 10
}

// pss is a process's proportional set size in bytes (0 when it cannot be read).
func pss(pid int) int64 {
	return meminfoKiB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:") << 10
}

func meminfoKiB(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// containerPSS sums the PSS of the owner's containers' processes (the init
// process and its descendants) and of their shims (the init's parents).
func containerPSS(ctx context.Context, cli *client.Client, owner string) (procs, shims int64, err error) {
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{Filters: client.Filters{}.Add("label", port.LabelOwner+"="+owner)})
	if err != nil {
		return 0, 0, err
	}
	for _, c := range cs.Items {
		ins, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil {
			return 0, 0, err
		}
		if ins.Container.State == nil || ins.Container.State.Pid == 0 {
			return 0, 0, fmt.Errorf("container %s is not running", c.ID)
		}
		pid := ins.Container.State.Pid
		for _, p := range descendants(pid) {
			procs += pss(p)
		}
		shims += pss(ppid(pid))
	}
	return procs, shims, nil
}

func descendants(pid int) []int {
	out := []int{pid}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, descendants(c)...)
		}
	}
	return out
}

func ppid(pid int) int {
	return int(meminfoKiB(fmt.Sprintf("/proc/%d/status", pid), "PPid:"))
}
