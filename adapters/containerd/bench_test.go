package containerd

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/internal/benchutil"
	"github.com/agentsandbox/sandbox/internal/testimages"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/port/porttest"
)

// BenchmarkRunOverhead alternates, for a trivial command, the containerd runner, the
// Docker runner and the `docker run` CLI, so all three see the same machine noise, and
// reports medians, p95s and the ratios of medians (target: containerd <= 0.6x the CLI).
func BenchmarkRunOverhead(b *testing.B) {
	ctr, image := runnerEnv(b, WithOwner("bench"))
	ctx := context.Background()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		b.Skip("no Docker daemon to compare with")
	}
	ref, archive, err := testimages.AgentArchive(ctx)
	if err != nil || ref != image {
		b.Fatalf("agent image: %v (%s vs %s)", err, ref, image)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		b.Fatal(err)
	}
	dr, err := docker.NewRunner(docker.WithClient(cli), docker.WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	dockerCLI, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("docker CLI not found")
	}
	spec := func() port.RunSpec {
		return port.RunSpec{RunID: porttest.RunID("bench"), Image: image, Argv: []string{"/agent", "exit", "0"}}
	}
	var tc, td, tcli []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if res, err := ctr.RunOnce(ctx, spec()); err != nil || res.ExitCode != 0 {
			b.Fatalf("containerd: %v %+v", err, res)
		}
		tc = append(tc, time.Since(t0))
		t0 = time.Now()
		if res, err := dr.RunOnce(ctx, spec()); err != nil || res.ExitCode != 0 {
			b.Fatalf("docker: %v %+v", err, res)
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
