package kubernetes

import (
	"bytes"
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/internal/testsupport/kubetest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// rawPod runs the probe's trivial command in a plain Pod through client-go (no
// lockdown, no init container, no log): create, watch until Succeeded. With cleanup it
// also reads the log, deletes the Pod and waits until it is gone, as RunOnce does.
func rawPod(ctx context.Context, tb testing.TB, cli k8s.Interface, image string, cleanup bool) (completed, total time.Duration) {
	pods := cli.CoreV1().Pods(testNamespace)
	name := podName("raw")
	rc := kubetest.RuntimeClassRunc
	t0 := time.Now()
	p, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:    corev1.RestartPolicyNever,
			RuntimeClassName: &rc,
			Containers:       []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"/agent", "echo", "out", "err"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: p.ResourceVersion})
	if err != nil {
		tb.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if pod, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted && pod.Status.Phase == corev1.PodSucceeded {
			break
		} else if ok && pod.Status.Phase == corev1.PodFailed {
			tb.Fatalf("raw pod failed: %+v", pod.Status)
		}
	}
	w.Stop()
	completed = time.Since(t0)
	if cleanup {
		if _, err := pods.GetLogs(name, &corev1.PodLogOptions{}).Do(ctx).Raw(); err != nil {
			tb.Fatal(err)
		}
	}
	r := &Runner{cli: cli, cfg: config{namespace: testNamespace}}
	if err := r.remove(ctx, name, false); err != nil {
		tb.Fatal(err)
	}
	return completed, time.Since(t0)
}

// BenchmarkRunOverheadVsRawPod alternates a trivial run through RunOnce (the locked
// down Pod, its network removed by the node's runtime wrapper, log follow, delete and
// wait until gone), the same with the network init container instead ("runonce-init")
// and a plain Pod through client-go, so all see the same machine noise, and reports
// medians and the ratios against the raw Pod's create→completed and its
// create→completed→log→gone.
func BenchmarkRunOverheadVsRawPod(b *testing.B) {
	e := setup(b)
	r, ri := e.runner(b), e.initRunner(b)
	ctx := context.Background()
	// The Docker runner side by side (same image, same lockdown, same bridge) when a
	// Docker engine is reachable.
	var d *docker.Runner
	if dr, err := docker.NewRunner(docker.WithOwner(e.owner), docker.WithBridge(e.bridge), docker.WithCleanupConcurrency(0)); err == nil {
		_, archive, aerr := sandboxtest.ProbeImage(ctx)
		if aerr == nil && dr.LoadImage(ctx, bytes.NewReader(archive)) == nil {
			d = dr
			defer d.Close()
		} else {
			dr.Close()
		}
	}
	var runs, initRuns, rawDone, rawGone, dock []time.Duration
	for b.Loop() {
		if d != nil {
			t0 := time.Now()
			res, err := d.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: e.image, Argv: []string{"/agent", "echo", "out", "err"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("docker RunOnce: %v %+v", err, res)
			}
			dock = append(dock, time.Since(t0))
		}
		t0 := time.Now()
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: e.image, Argv: []string{"/agent", "echo", "out", "err"}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "out" || string(res.Stderr) != "err" {
			b.Fatalf("RunOnce: %v %+v", err, res)
		}
		runs = append(runs, time.Since(t0))
		t0 = time.Now()
		res, err = ri.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: e.image, Argv: []string{"/agent", "echo", "out", "err"}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "out" || string(res.Stderr) != "err" {
			b.Fatalf("RunOnce with the init container: %v %+v", err, res)
		}
		initRuns = append(initRuns, time.Since(t0))
		done, gone := rawPod(ctx, b, e.cluster.Client, e.image, true)
		rawDone = append(rawDone, done)
		rawGone = append(rawGone, gone)
	}
	b.StopTimer()
	k50 := benchutil.Report(b, "runonce", runs)
	d50 := benchutil.Report(b, "raw-completed", rawDone)
	g50 := benchutil.Report(b, "raw-gone", rawGone)
	benchutil.Ratio(b, "runonce/raw-completed-p50-ratio", k50, d50)
	benchutil.Ratio(b, "runonce/raw-gone-p50-ratio", k50, g50)
	benchutil.Ratio(b, "runonce-init/raw-completed-p50-ratio", benchutil.Report(b, "runonce-init", initRuns), d50)
	if d != nil {
		benchutil.Ratio(b, "runonce/docker-p50-ratio", k50, benchutil.Report(b, "docker", dock))
	}
	b.ReportMetric(0, "ns/op")
}
