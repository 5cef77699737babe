package docker

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// rawRun is the raw Docker API's path for one sandbox with the same lockdown (the same
// container and host config): create, attach, wait, start, exit, output drained. It
// returns the time to result and the time to remove after it.
func rawRun(ctx context.Context, cli *client.Client, spec port.RunSpec, runtime string) (time.Duration, time.Duration, error) {
	spec = spec.WithDefaults()
	t0 := time.Now()
	cfg, hc := sandboxConfig(spec, spec.Argv, runner.ResourceLabels("bench", spec.RunID, port.KindSandbox, nil, t0), "")
	hc.Runtime = runtime
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: containerName(spec.RunID), Config: cfg, HostConfig: hc})
	if err != nil {
		return 0, 0, err
	}
	id := created.ID
	remove := func() time.Duration {
		t1 := time.Now()
		_, _ = cli.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
		return time.Since(t1)
	}
	att, err := cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		return 0, remove(), err
	}
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, att.Reader); close(copied) }()
	wait := cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		att.Close()
		return 0, remove(), err
	}
	select {
	case w := <-wait.Result:
		<-copied
		att.Close()
		res := time.Since(t0)
		if w.StatusCode != 0 {
			err = fmt.Errorf("exit %d", w.StatusCode)
		}
		return res, remove(), err
	case err := <-wait.Error:
		att.Close()
		return 0, remove(), err
	}
}

// BenchmarkCriticalPath alternates, in one loop, the raw Docker API's path (rawRun)
// and RunOnce for a trivial command with the same lockdown, and reports the time to
// result of both, their ratio (goal <= 1.05) and the raw path's remove time (which
// RunOnce leaves to the background).
func BenchmarkCriticalPath(b *testing.B) {
	cli, image := dockerEnv(b)
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("bench")))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	spec := func() port.RunSpec {
		return port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: image, Argv: []string{"/agent", "exit", "0"}}
	}
	var raw, rawDel, lib []time.Duration
	for b.Loop() {
		res, del, err := rawRun(ctx, cli, spec(), "")
		if err != nil {
			b.Fatalf("raw: %v", err)
		}
		raw, rawDel = append(raw, res), append(rawDel, del)
		t0 := time.Now()
		out, err := r.RunOnce(ctx, spec())
		if err != nil || out.ExitCode != 0 {
			b.Fatalf("RunOnce: %v %+v", err, out)
		}
		lib = append(lib, time.Since(t0))
		// The removal left to the background is outside the time to result, as the
		// raw path's is: let it finish before the next sample.
		if err := r.Drain(ctx); err != nil {
			b.Fatal(err)
		}
	}
	r50 := benchutil.Report(b, "raw", raw)
	l50 := benchutil.Report(b, "lib", lib)
	benchutil.Ratio(b, "lib/raw-p50-ratio", l50, r50)
	b.ReportMetric(float64(benchutil.Quantile(rawDel, 0.5))/1e6, "raw-remove-p50-ms")
	b.ReportMetric(0, "ns/op")
}
