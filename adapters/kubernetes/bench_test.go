package kubernetes

import (
	"bytes"
	"context"
	"math/rand/v2"
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

// rawPod runs the probe's trivial command in a minimal Pod through client-go (no
// lockdown, no init container, no service account token, no log follow): create, then
// watch. exited is when the API first shows the container terminated (what RunOnce
// waits for); succeeded when the Pod's phase is Succeeded, which the kubelet reports
// only after it has also torn the Pod's sandbox down (about a second later); gone
// adds reading the log and deleting the Pod until it is gone.
//
// With volume the Pod has one memory-backed emptyDir at /tmp and the watch stops at
// exited (then log, delete): a Pod with any volume waits in the kubelet until its
// volume manager has mounted them (a poll every 300 ms), as every sandbox Pod does.
func rawPod(ctx context.Context, tb testing.TB, cli k8s.Interface, image string, volume bool) (exited, succeeded, gone time.Duration) {
	pods := cli.CoreV1().Pods(testNamespace)
	name := podName("raw")
	rc := kubetest.RuntimeClassRunc
	c := corev1.Container{Name: "c", Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"/agent", "echo", "out", "err"}}
	spec := corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		RuntimeClassName:             &rc,
		AutomountServiceAccountToken: ptr(false),
	}
	if volume {
		spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	}
	spec.Containers = []corev1.Container{c}
	t0 := time.Now()
	p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: p.ResourceVersion})
	if err != nil {
		tb.Fatal(err)
	}
	for ev := range w.ResultChan() {
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type == watch.Deleted {
			continue
		}
		if exited == 0 && len(pod.Status.ContainerStatuses) == 1 && pod.Status.ContainerStatuses[0].State.Terminated != nil {
			exited = time.Since(t0)
		}
		if pod.Status.Phase == corev1.PodSucceeded || volume && exited > 0 {
			break
		} else if pod.Status.Phase == corev1.PodFailed {
			tb.Fatalf("raw pod failed: %+v", pod.Status)
		}
	}
	w.Stop()
	succeeded = time.Since(t0)
	if exited == 0 {
		exited = succeeded
	}
	if _, err := pods.GetLogs(name, &corev1.PodLogOptions{}).Do(ctx).Raw(); err != nil {
		tb.Fatal(err)
	}
	r := &Runner{cli: cli, cfg: config{namespace: testNamespace}}
	if err := r.remove(ctx, name, true); err != nil {
		tb.Fatal(err)
	}
	return exited, succeeded, time.Since(t0)
}

// BenchmarkRunOverheadVsRawPod alternates a trivial run through RunOnce (the locked
// down Pod, its network removed by the node's runtime wrapper, log follow, delete and
// wait until gone), the same with the network init container instead ("runonce-init")
// and a minimal Pod through client-go (see rawPod), so all see the same machine noise,
// and reports medians and ratios. The fair baseline is raw-exited (create until the
// API shows the container ended, as RunOnce waits); raw-succeeded (the Pod's phase) and
// raw-gone (…, log read, deleted) are what a client waiting for the phase sees;
// raw-volume-exited is the same minimal Pod with one emptyDir (every sandbox Pod has
// volumes, and the kubelet waits for them), raw-volume-gone adds log and deletion.
func BenchmarkRunOverheadVsRawPod(b *testing.B) {
	e := setup(b)
	r, ri := e.runner(b), e.initRunner(b)
	ctx := context.Background()
	// The Docker runner side by side (same image, same lockdown, same bridge) when a
	// Docker engine is reachable.
	var d *docker.Runner
	if dr, err := docker.NewRunner(docker.WithOwner(e.owner), docker.WithBridge(e.bridge), docker.WithCleanupConcurrency(0)); err == nil {
		_, archive, aerr := sandboxtest.ProbeImage(ctx)
		if aerr == nil {
			_, aerr = dr.LoadImage(ctx, bytes.NewReader(archive))
		}
		if aerr == nil {
			d = dr
			defer d.Close()
		} else {
			dr.Close()
		}
	}
	var runs, initRuns, rawExited, rawDone, rawGone, rawVolExited, rawVolGone, dock []time.Duration
	// The kubelet notices a container's end at its next relist, once a second, and
	// back-to-back runs lock onto that tick: every measured step starts after a random
	// pause (not timed), so each sees the tick at a random phase, as real runs do.
	jitter := func() {
		b.StopTimer()
		time.Sleep(rand.N(time.Second))
		b.StartTimer()
	}
	for b.Loop() {
		if d != nil {
			jitter()
			t0 := time.Now()
			res, err := d.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: e.image, Argv: []string{"/agent", "echo", "out", "err"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("docker RunOnce: %v %+v", err, res)
			}
			dock = append(dock, time.Since(t0))
		}
		jitter()
		t0 := time.Now()
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: e.image, Argv: []string{"/agent", "echo", "out", "err"}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "out" || string(res.Stderr) != "err" {
			b.Fatalf("RunOnce: %v %+v", err, res)
		}
		runs = append(runs, time.Since(t0))
		jitter()
		t0 = time.Now()
		res, err = ri.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("bench"), Image: e.image, Argv: []string{"/agent", "echo", "out", "err"}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "out" || string(res.Stderr) != "err" {
			b.Fatalf("RunOnce with the init container: %v %+v", err, res)
		}
		initRuns = append(initRuns, time.Since(t0))
		jitter()
		exited, done, gone := rawPod(ctx, b, e.cluster.Client, e.image, false)
		rawExited = append(rawExited, exited)
		rawDone = append(rawDone, done)
		rawGone = append(rawGone, gone)
		jitter()
		exited, _, gone = rawPod(ctx, b, e.cluster.Client, e.image, true)
		rawVolExited = append(rawVolExited, exited)
		rawVolGone = append(rawVolGone, gone)
	}
	b.StopTimer()
	k50 := benchutil.Report(b, "runonce", runs)
	i50 := benchutil.Report(b, "runonce-init", initRuns)
	x50 := benchutil.Report(b, "raw-exited", rawExited)
	d50 := benchutil.Report(b, "raw-succeeded", rawDone)
	g50 := benchutil.Report(b, "raw-gone", rawGone)
	benchutil.Ratio(b, "runonce/raw-exited-p50-ratio", k50, x50)
	benchutil.Ratio(b, "runonce-init/raw-exited-p50-ratio", i50, x50)
	benchutil.Ratio(b, "runonce/raw-succeeded-p50-ratio", k50, d50)
	benchutil.Ratio(b, "runonce/raw-gone-p50-ratio", k50, g50)
	v50 := benchutil.Report(b, "raw-volume-exited", rawVolExited)
	benchutil.Ratio(b, "runonce/raw-volume-exited-p50-ratio", k50, v50)
	benchutil.Ratio(b, "runonce-init/raw-volume-exited-p50-ratio", i50, v50)
	benchutil.Ratio(b, "runonce/raw-volume-gone-p50-ratio", k50, benchutil.Report(b, "raw-volume-gone", rawVolGone))
	if d != nil {
		benchutil.Ratio(b, "runonce/docker-p50-ratio", k50, benchutil.Report(b, "docker", dock))
	}
	b.ReportMetric(0, "ns/op")
}
