package docker

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/port/porttest"
)

// BenchmarkRunOnceVsCLI alternates RunOnce of a trivial command with `docker run --rm
// --network none IMAGE` of the same command, so both see the same machine noise, and
// reports medians, p95s and the ratio library/CLI (target <= 1.0).
func BenchmarkRunOnceVsCLI(b *testing.B) {
	cli, image := dockerEnv(b)
	r, err := NewRunner(WithClient(cli), WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("docker CLI not found")
	}
	ctx := context.Background()
	var lib, cmd []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: porttest.RunID("bench"), Image: image, Argv: []string{"/agent", "exit", "0"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("RunOnce: %v %+v", err, res)
		}
		lib = append(lib, time.Since(t0))

		t0 = time.Now()
		if out, err := exec.Command(docker, "run", "--rm", "--network", "none", image, "exit", "0").CombinedOutput(); err != nil {
			b.Fatalf("docker run: %v: %s", err, out)
		}
		cmd = append(cmd, time.Since(t0))
	}
	b.StopTimer()
	reportPair(b, "lib", lib, "cli", cmd)
}

// reportPair reports p50/p95 of two alternated samples and the ratio of their medians.
func reportPair(b *testing.B, an string, a []time.Duration, bn string, bs []time.Duration) {
	pa50, pa95 := percentiles(a)
	pb50, pb95 := percentiles(bs)
	b.ReportMetric(float64(pa50)/1e6, an+"-p50-ms")
	b.ReportMetric(float64(pa95)/1e6, an+"-p95-ms")
	b.ReportMetric(float64(pb50)/1e6, bn+"-p50-ms")
	b.ReportMetric(float64(pb95)/1e6, bn+"-p95-ms")
	b.ReportMetric(float64(pa50)/float64(pb50), an+"/"+bn+"-p50-ratio")
	b.ReportMetric(0, "ns/op") // the per-op figure mixes both sides; the metrics above are the result
}

func percentiles(d []time.Duration) (p50, p95 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*95/100)]
}
