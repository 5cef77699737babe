package containerd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkRunOverhead alternates, for a trivial command, the containerd runner, the
// Docker runner and the `docker run` CLI, so all three see the same machine noise, and
// reports medians, p95s and the ratios of medians (target: containerd <= 0.6x the CLI).
func BenchmarkRunOverhead(b *testing.B) { benchRunOverhead(b, false) }

// BenchmarkRunOverheadWithProxy is BenchmarkRunOverhead with an in-process proxy started
// and stopped around each library run and the bridge as the sandbox's entrypoint (the
// CLI side stays a plain run: it has no proxy to start).
func BenchmarkRunOverheadWithProxy(b *testing.B) { benchRunOverhead(b, true) }

func benchRunOverhead(b *testing.B, withProxy bool) {
	var opts []Option
	var dopts []docker.Option
	var pm *inprocproxy.Manager
	if withProxy {
		bin, err := bridge.Build(context.Background(), filepath.Join(os.TempDir(), "agentsandbox-bridge-test"))
		if err != nil {
			b.Fatal(err)
		}
		opts, dopts = append(opts, WithBridge(bin)), append(dopts, docker.WithBridge(bin))
		base, err := os.MkdirTemp("", "bench-inproc")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(base)
		if pm, err = inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(testenv.Owner("bench"))); err != nil {
			b.Fatal(err)
		}
		defer pm.Shutdown(context.Background())
	}
	ctr, image := runnerEnv(b, append(opts, WithOwner(testenv.Owner("bench")))...)
	ctx := context.Background()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		b.Skip("no Docker daemon to compare with")
	}
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil || ref != image {
		b.Fatalf("agent image: %v (%s vs %s)", err, ref, image)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		b.Fatal(err)
	}
	dr, err := docker.NewRunner(append(dopts, docker.WithClient(cli), docker.WithOwner(testenv.Owner("bench")))...)
	if err != nil {
		b.Fatal(err)
	}
	dockerCLI, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("docker CLI not found")
	}
	// libRun is one library run: with the proxy, its start and stop are included.
	libRun := func(r port.SandboxRunner) error {
		spec := port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: image, Argv: []string{"/agent", "exit", "0"}}
		if pm != nil {
			p, err := pm.Start(ctx, port.ProxySpec{RunID: spec.RunID, Upstream: "http://127.0.0.1:9", APIKey: "k", Attribution: port.Attribution{BillingAccountID: "a"}})
			if err != nil {
				return err
			}
			defer p.Stop(ctx)
			sock := p.Socket()
			spec.LLM = &sock
		}
		res, err := r.RunOnce(ctx, spec)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		return err
	}
	var tc, td, tcli []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := libRun(ctr); err != nil {
			b.Fatalf("containerd: %v", err)
		}
		tc = append(tc, time.Since(t0))
		t0 = time.Now()
		if err := libRun(dr); err != nil {
			b.Fatalf("docker: %v", err)
		}
		td = append(td, time.Since(t0))
		t0 = time.Now()
		if out, err := exec.Command(dockerCLI, "run", "--rm", "--network", "none", image, "exit", "0").CombinedOutput(); err != nil {
			b.Fatalf("docker run: %v: %s", err, out)
		}
		tcli = append(tcli, time.Since(t0))
	}
	c50 := benchutil.Report(b, "ctr", tc)
	d50 := benchutil.Report(b, "dockerlib", td)
	l50 := benchutil.Report(b, "cli", tcli)
	benchutil.Ratio(b, "ctr/cli-p50-ratio", c50, l50)
	benchutil.Ratio(b, "ctr/dockerlib-p50-ratio", c50, d50)
	b.ReportMetric(0, "ns/op")
}
