package docker

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkRunOnceVsCLI alternates RunOnce of a trivial command with `docker run --rm
// --network none IMAGE` of the same command, so both see the same machine noise, and
// reports medians, p95s and the ratio library/CLI (target <= 1.0).
func BenchmarkRunOnceVsCLI(b *testing.B) {
	cli, image := dockerEnv(b)
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("bench")))
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
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: image, Argv: []string{"/agent", "exit", "0"}})
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
	l50 := benchutil.Report(b, "lib", lib)
	c50 := benchutil.Report(b, "cli", cmd)
	benchutil.Ratio(b, "lib/cli-p50-ratio", l50, c50)
	b.ReportMetric(0, "ns/op") // the per-op time mixes both sides; the metrics above are the result
}
