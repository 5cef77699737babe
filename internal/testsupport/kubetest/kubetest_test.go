package kubetest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestMain starts the cluster; Main fails the binary when the teardown leaves anything.
func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestPodGetsAnIsolatedInterface runs the probe agent in a pod: it runs, as the
// cluster's CNI gives it one interface besides lo and no default route, and its
// output comes back through the kubelet.
func TestPodGetsAnIsolatedInterface(t *testing.T) {
	c := Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	for _, rc := range c.RuntimeClasses {
		t.Run(rc, func(t *testing.T) {
			name := "probe-" + rc
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.PodSpec{
					RestartPolicy:    corev1.RestartPolicyNever,
					RuntimeClassName: &rc,
					Containers: []corev1.Container{{
						Name: "probe", Image: ref, ImagePullPolicy: corev1.PullNever,
						Command: []string{"/agent", "net"},
					}},
				},
			}
			if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer c.Client.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{})
			for {
				p, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("pod not done: %+v", p.Status)
				}
				time.Sleep(200 * time.Millisecond)
			}
			out, err := c.Client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).Do(ctx).Raw()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s", rc, out)
			if rc == RuntimeClassRunc && !strings.Contains(string(out), "iface eth0") {
				t.Errorf("no CNI interface in the pod: %q", out)
			}
		})
	}
}
