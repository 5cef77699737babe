package containerd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/capture"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// rawPhases are the phases of a run, in order, on both paths.
var rawPhases = []string{"image", "container", "task", "start", "exit", "output"}

// rawRun is the raw containerd client's path for one sandbox with the same lockdown
// (the same OCI spec options but the image's, which it reads with the client's own
// oci.WithImageConfig): what a caller of the client would write. It returns each
// phase's duration, the time to result, and the time to delete after it.
func rawRun(ctx context.Context, r *Runner, spec port.RunSpec) (map[string]time.Duration, time.Duration, time.Duration, error) {
	spec = spec.WithDefaults()
	ctx = r.ns(ctx)
	ph := map[string]time.Duration{}
	t0 := time.Now()
	last := t0
	mark := func(p string) { now := time.Now(); ph[p] = now.Sub(last); last = now }

	img, err := r.cli.GetImage(ctx, spec.Image)
	if errdefs.IsNotFound(err) {
		img, err = r.cli.GetImage(ctx, "docker.io/"+spec.Image)
	}
	if err != nil {
		return nil, 0, 0, err
	}
	if ok, err := img.IsUnpacked(ctx, r.cfg.snapshotter); err != nil || !ok {
		return nil, 0, 0, fmt.Errorf("not unpacked: %v", err)
	}
	mark("image")
	id := containerID(spec.RunID)
	lbls := runner.ResourceLabels(r.cfg.owner, spec.RunID, port.KindSandbox, nil, t0)
	c, err := r.cli.NewContainer(ctx, id,
		client.WithImage(img),
		client.WithSnapshotter(r.cfg.snapshotter),
		client.WithNewSnapshot(id, img),
		client.WithNewSpec(append([]oci.SpecOpts{oci.WithImageConfig(img), oci.WithAdditionalGIDs("")}, lockdown(spec, "")...)...),
		client.WithContainerLabels(lbls),
		r.withRuntime(),
	)
	if err != nil {
		return nil, 0, 0, err
	}
	mark("container")
	stdout, stderr := &capture.Buffer{Max: 1 << 20}, &capture.Buffer{Max: 1 << 20}
	task, err := c.NewTask(ctx, cio.NewCreator(cio.WithStreams(nil, stdout, stderr)))
	if err != nil {
		_ = c.Delete(ctx, client.WithSnapshotCleanup)
		return nil, 0, 0, err
	}
	mark("task")
	statusC, err := task.Wait(ctx)
	if err == nil {
		err = task.Start(ctx)
	}
	mark("start")
	var code uint32
	if err == nil {
		st := <-statusC
		code, _, err = st.Result()
		mark("exit")
		task.IO().Wait()
		mark("output")
	}
	result := time.Since(t0)
	t1 := time.Now()
	if derr := deleteTask(ctx, task, taskExited); derr != nil && err == nil {
		err = derr
	}
	task.IO().Close()
	if derr := c.Delete(ctx, client.WithSnapshotCleanup); derr != nil && err == nil {
		err = derr
	}
	if err == nil && code != 0 {
		out, _ := stderr.Result()
		err = fmt.Errorf("exit %d: %s", code, out)
	}
	return ph, result, time.Since(t1), err
}

// BenchmarkCriticalPath alternates, in one loop, the raw client's path (rawRun) and
// RunOnce for a trivial command with the same lockdown, and reports the time to result
// of both (p50 and p95), their ratio (goal <= 1.05), the raw path's delete time (which
// RunOnce leaves to the background) and each phase's median on both paths.
func BenchmarkCriticalPath(b *testing.B) { benchCriticalPath(b) }

func benchCriticalPath(b *testing.B, opts ...Option) {
	var (
		phase = map[string][]time.Duration{}
		last  time.Time
	)
	hook := func(p string) {
		now := time.Now()
		phase["lib-"+p] = append(phase["lib-"+p], now.Sub(last))
		last = now
	}
	r, image := runnerEnv(b, append(opts, WithOwner(testenv.Owner("bench")), func(c *config) error { c.phaseHook = hook; return nil })...)
	ctx := context.Background()
	spec := func() port.RunSpec {
		return port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: image, Argv: []string{"/agent", "exit", "0"}}
	}
	// One warm-up of each, so neither pays for the first unpack or cache fill.
	if _, _, _, err := rawRun(ctx, r, spec()); err != nil {
		b.Fatal(err)
	}
	if _, err := r.RunOnce(ctx, spec()); err != nil {
		b.Fatal(err)
	}
	phase = map[string][]time.Duration{}
	var raw, rawDel, lib []time.Duration
	for b.Loop() {
		ph, res, del, err := rawRun(ctx, r, spec())
		if err != nil {
			b.Fatalf("raw: %v", err)
		}
		raw, rawDel = append(raw, res), append(rawDel, del)
		for p, d := range ph {
			phase["raw-"+p] = append(phase["raw-"+p], d)
		}
		// Pending removals of the previous library run are not this one's business,
		// but they share the machine: let them finish outside the timing, as the raw
		// path's delete is outside its time to result.
		if err := r.Drain(ctx); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		last = t0
		res2, err := r.RunOnce(ctx, spec())
		if err != nil || res2.ExitCode != 0 {
			b.Fatalf("RunOnce: %v %+v", err, res2)
		}
		lib = append(lib, time.Since(t0))
		if err := r.Drain(ctx); err != nil {
			b.Fatal(err)
		}
	}
	r50 := benchutil.Report(b, "raw", raw)
	l50 := benchutil.Report(b, "lib", lib)
	benchutil.Ratio(b, "lib/raw-p50-ratio", l50, r50)
	b.ReportMetric(float64(benchutil.Quantile(rawDel, 0.5))/1e6, "raw-delete-p50-ms")
	for _, p := range rawPhases {
		for _, side := range []string{"raw", "lib"} {
			if d := phase[side+"-"+p]; len(d) > 0 {
				b.ReportMetric(float64(benchutil.Quantile(d, 0.5))/1e6, side+"-"+p+"-ms")
			}
		}
	}
	b.ReportMetric(0, "ns/op")
}
