package containerd

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/docker"
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
	c50, c95 := pct(tc)
	d50, d95 := pct(td)
	l50, l95 := pct(tcli)
	for name, v := range map[string]time.Duration{"ctr-p50-ms": c50, "ctr-p95-ms": c95, "dockerlib-p50-ms": d50, "dockerlib-p95-ms": d95, "cli-p50-ms": l50, "cli-p95-ms": l95} {
		b.ReportMetric(float64(v)/1e6, name)
	}
	b.ReportMetric(float64(c50)/float64(l50), "ctr/cli-p50-ratio")
	b.ReportMetric(float64(c50)/float64(d50), "ctr/dockerlib-p50-ratio")
	b.ReportMetric(0, "ns/op")
}

func pct(d []time.Duration) (p50, p95 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*95/100)]
}
