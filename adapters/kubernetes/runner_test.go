package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentsandbox/sandbox/internal/testsupport/kubetest"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// testNamespace is where the tests' Pods run; runnerUser is the identity the runner
// acts as, bound to Role there and nothing else.
const (
	testNamespace = "agentsandbox-test"
	runnerUser    = "agentsandbox-runner"
)

// env is what the package's tests share.
type env struct {
	cluster *kubetest.Cluster
	owner   string
	image   string // probe agent
	bridge  string
	init    string
	// restricted is the runner identity's client configuration (impersonation of
	// runnerUser through the admin's credentials).
	restricted *rest.Config
}

var (
	setupOnce sync.Once
	shared    env
	setupErr  error
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func setup(t testing.TB) env {
	t.Helper()
	c := kubetest.Shared(t)
	bridgePath := testenv.Bridge(t)
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		e := env{cluster: c, owner: testenv.Owner("kubetest"), bridge: bridgePath}
		ref, archive, err := sandboxtest.ProbeImage(ctx)
		if err == nil {
			err = c.ImportImage(ctx, archive)
		}
		if err != nil {
			setupErr = fmt.Errorf("probe image: %w", err)
			return
		}
		e.image = ref
		if e.init, err = BuildInit(ctx, filepath.Join(os.TempDir(), "agentsandbox-kube-init-test")); err != nil {
			setupErr = err
			return
		}
		if err := grantRunner(ctx, c.Client); err != nil {
			setupErr = err
			return
		}
		e.restricted = rest.CopyConfig(c.Config)
		e.restricted.Impersonate = rest.ImpersonationConfig{UserName: runnerUser}
		shared = e
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return shared
}

// grantRunner makes the test namespace and binds the runner's Role there to runnerUser.
func grantRunner(ctx context.Context, cli k8s.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}
	if _, err := cli.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// An existing Role (a cluster kept from an earlier version) is brought up to date.
	role := Role(testNamespace, "agentsandbox-runner")
	if _, err := cli.RbacV1().Roles(testNamespace).Create(ctx, role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = cli.RbacV1().Roles(testNamespace).Update(ctx, role, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agentsandbox-runner", Namespace: testNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agentsandbox-runner"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: runnerUser}},
	}
	if _, err := cli.RbacV1().RoleBindings(testNamespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The namespace's default service account appears a moment after the namespace;
	// the admission of every Pod needs it.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := cli.CoreV1().ServiceAccounts(testNamespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no default service account in %s: %w", testNamespace, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runner is the runner the tests share: the node's runtime wrapper applies the
// process limit and removes the Pod's network (no init container).
func (e env) runner(t testing.TB, opts ...Option) *Runner {
	t.Helper()
	return e.initRunner(t, append([]Option{WithRuntimeNetworkRemoval()}, opts...)...)
}

// initRunner removes the Pod's network with the init container instead (the way that
// needs nothing on the node).
func (e env) initRunner(t testing.TB, opts ...Option) *Runner {
	t.Helper()
	base := []Option{WithConfig(e.restricted), WithNamespace(testNamespace), WithOwner(e.owner), WithBridge(e.bridge), WithInit(e.init),
		WithImagePullPolicy(corev1.PullNever), WithRuntimePIDsLimit(), WithRuntimeClass(kubetest.RuntimeClassRunc)}
	r, err := NewRunner(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// leftovers lists the Pods the cluster still holds for a run of e's owner.
func (e env) leftovers(ctx context.Context, runID string) ([]string, error) {
	sel := labels.Set{port.LabelOwner: e.owner, port.LabelRunID: runLabel(runID)}
	pods, err := e.cluster.Client.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var left []string
	for _, p := range pods.Items {
		left = append(left, "pod:"+p.Name+"("+string(p.Status.Phase)+")")
	}
	return left, nil
}

func TestRunnerConformance(t *testing.T) {
	e := setup(t)
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: e.runner(t), Image: e.image, Leftovers: e.leftovers})
}

// TestNetworkRemovalBothWays: whether the init container or the node's runtime
// wrapper removes the Pod's CNI interface, the agent sees loopback only and no route,
// and only the init container way has a container with a capability.
func TestNetworkRemovalBothWays(t *testing.T) {
	e := setup(t)
	for name, r := range map[string]*Runner{"init container": e.initRunner(t), "runtime wrapper": e.runner(t)} {
		t.Run(name, func(t *testing.T) {
			spec := port.RunSpec{RunID: sandboxtest.RunID("net"), Image: e.image, Argv: []string{"/agent", "net"}}.WithDefaults()
			pod := r.buildPod(spec, podSpec{name: podName(spec.RunID), created: time.Now()})
			if _, ok := pod.Annotations[NetdownAnnotation]; ok == (name == "init container") || (len(pod.Spec.InitContainers) == 1) != (name == "init container") {
				t.Errorf("pod: annotations %v, %d init containers", pod.Annotations, len(pod.Spec.InitContainers))
			}
			res, err := r.RunOnce(context.Background(), spec)
			if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "iface lo\nroutes 0" {
				t.Errorf("network view: %v %q %q", err, res.Stdout, res.Stderr)
			}
		})
	}
	// A CNI interface is there to remove: a Pod without either way has one.
	r := e.initRunner(t, WithoutNetworkInit())
	res, err := r.RunOnce(context.Background(), port.RunSpec{RunID: sandboxtest.RunID("net"), Image: e.image, Argv: []string{"/agent", "net"}})
	if err != nil || !strings.Contains(string(res.Stdout), "iface eth0") {
		t.Errorf("control without removal: %v %q", err, res.Stdout)
	}
}

func TestRunnerRBACIsLeastPrivilege(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cli, err := k8s.NewForConfig(e.restricted)
	if err != nil {
		t.Fatal(err)
	}
	// What the runner needs works (RunOnce and the session suite prove the rest).
	if _, err := cli.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list pods in its namespace: %v", err)
	}
	// Exec is allowed in its namespace: past authorization, the missing Pod is the answer.
	if err := cli.CoreV1().RESTClient().Post().Namespace(testNamespace).Resource("pods").Name("x").SubResource("exec").Do(ctx).Error(); !apierrors.IsNotFound(err) {
		t.Errorf("exec in its namespace: err = %v, want NotFound (authorized, no such pod)", err)
	}
	// What it does not need is forbidden.
	for name, call := range map[string]func() error{
		"read secrets": func() error {
			_, err := cli.CoreV1().Secrets(testNamespace).List(ctx, metav1.ListOptions{})
			return err
		},
		"pods in another namespace": func() error {
			_, err := cli.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			return err
		},
		"nodes": func() error {
			_, err := cli.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		},
		"exec in another namespace": func() error {
			return cli.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("x").SubResource("exec").Do(ctx).Error()
		},
		"attach": func() error {
			return cli.CoreV1().RESTClient().Post().Namespace(testNamespace).Resource("pods").Name("x").SubResource("attach").Do(ctx).Error()
		},
		"port forwarding": func() error {
			return cli.CoreV1().RESTClient().Post().Namespace(testNamespace).Resource("pods").Name("x").SubResource("portforward").Do(ctx).Error()
		},
		"ephemeral containers": func() error {
			_, err := cli.CoreV1().Pods(testNamespace).UpdateEphemeralContainers(ctx, "x", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: testNamespace}}, metav1.UpdateOptions{})
			return err
		},
		"update pods": func() error {
			_, err := cli.CoreV1().Pods(testNamespace).Update(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: testNamespace}}, metav1.UpdateOptions{})
			return err
		},
		"service accounts": func() error {
			_, err := cli.CoreV1().ServiceAccounts(testNamespace).List(ctx, metav1.ListOptions{})
			return err
		},
		"roles": func() error {
			_, err := cli.RbacV1().Roles(testNamespace).List(ctx, metav1.ListOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: err = %v, want Forbidden", name, err)
		}
	}
}

// TestPodSpecLockdown checks the Pod the runner submits, field by field, as the API
// server stored it.
func TestPodSpecLockdown(t *testing.T) {
	e := setup(t)
	r := e.initRunner(t)
	spec := port.RunSpec{RunID: sandboxtest.RunID("spec"), Image: e.image, Argv: []string{"/agent", "id"}}.WithDefaults()
	pod := r.buildPod(spec, podSpec{name: podName(spec.RunID), created: time.Now()})
	ps := pod.Spec
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken || ps.EnableServiceLinks == nil || *ps.EnableServiceLinks ||
		ps.HostNetwork || ps.HostPID || ps.HostIPC || ps.ActiveDeadlineSeconds == nil || ps.RestartPolicy != corev1.RestartPolicyNever ||
		ps.RuntimeClassName == nil || *ps.RuntimeClassName != kubetest.RuntimeClassRunc {
		t.Errorf("pod spec: %+v", ps)
	}
	a := ps.Containers[0]
	sc := a.SecurityContext
	if *sc.RunAsUser != 1001 || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || *sc.Privileged ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("agent security context: %+v", sc)
	}
	if len(ps.InitContainers) != 1 || len(ps.InitContainers[0].SecurityContext.Capabilities.Add) != 1 || ps.InitContainers[0].SecurityContext.Capabilities.Add[0] != "NET_ADMIN" {
		t.Errorf("init containers: %+v", ps.InitContainers)
	}
	for _, v := range ps.Volumes {
		if v.Secret != nil || v.Projected != nil {
			t.Errorf("volume %s mounts API credentials or secrets", v.Name)
		}
		if v.EmptyDir != nil && v.EmptyDir.Medium != corev1.StorageMediumMemory {
			t.Errorf("volume %s is disk-backed", v.Name)
		}
	}
	res, err := r.RunOnce(context.Background(), port.RunSpec{RunID: spec.RunID, Image: e.image, Argv: []string{"/agent", "stat", "/var/run/secrets/kubernetes.io/serviceaccount/token"}})
	if err != nil || !strings.Contains(string(res.Stdout), "missing /var/run/secrets/kubernetes.io/serviceaccount/token") {
		t.Errorf("service account token in the sandbox: %+v %v", res, err)
	}
}

// TestSweepGraceDryRunOwner plays a host that died after creating a Pod: a Sweep keeps
// it within the grace period, only reports it in a dry run, never touches another
// owner's Pod, and then removes it.
func TestSweepGraceDryRunOwner(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	other := e.runner(t, WithOwner(e.owner+"-other"))
	ctx := context.Background()
	submit := func(r *Runner, runID string) string {
		spec := port.RunSpec{RunID: runID, Image: e.image, Argv: []string{"/agent", "sleep", "600"}}.WithDefaults()
		pod := r.buildPod(spec, podSpec{name: podName(runID), created: time.Now()})
		if _, err := r.cli.CoreV1().Pods(testNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return pod.Name
	}
	mine, theirs := sandboxtest.RunID("swept"), sandboxtest.RunID("kept")
	submit(r, mine)
	theirPod := submit(other, theirs)
	defer func() { _ = other.remove(ctx, theirPod, false) }()
	rep, err := r.Sweep(ctx, port.SweepOptions{OlderThan: time.Hour})
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("a sweep within the grace period removed %v (%v)", rep.Removed, err)
	}
	rep, err = r.Sweep(ctx, port.SweepOptions{DryRun: true})
	if err != nil || len(rep.Removed) != 1 || !strings.Contains(rep.Removed[0], mine) {
		t.Fatalf("dry run = %v (%v), want only the pod of %s", rep.Removed, err, mine)
	}
	if l, _ := e.leftovers(ctx, mine); len(l) != 1 {
		t.Fatalf("the dry run removed something: %v", l)
	}
	rep, err = r.Sweep(ctx, port.SweepOptions{RunID: mine})
	if err != nil || len(rep.Errors) > 0 || len(rep.Removed) != 1 {
		t.Fatalf("sweep = %+v (%v)", rep, err)
	}
	if l, err := e.leftovers(ctx, mine); err != nil || len(l) > 0 {
		t.Errorf("after the sweep: %v %v", l, err)
	}
	if _, err := r.cli.CoreV1().Pods(testNamespace).Get(ctx, theirPod, metav1.GetOptions{}); err != nil {
		t.Errorf("the sweep touched another owner's pod: %v", err)
	}
	if _, err := r.Sweep(ctx, port.SweepOptions{RunID: "../x"}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a bad run id: %v", err)
	}
}

// TestDeletedPodIsATypedError: a Pod deleted by someone else mid-run ends the run with
// a *PodLostError, and the output written before is kept.
func TestDeletedPodIsATypedError(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	ctx := context.Background()
	runID := sandboxtest.RunID("deleted")
	go func() {
		// Delete the Pod once the agent has written its line.
		for i := 0; i < 600; i++ {
			time.Sleep(100 * time.Millisecond)
			pods, err := e.cluster.Client.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{port.LabelRunID: runLabel(runID)}.String()})
			if err != nil || len(pods.Items) == 0 {
				continue
			}
			p := pods.Items[0]
			if st := agentState(&p); st == nil || st.Running == nil || time.Since(st.Running.StartedAt.Time) < 2*time.Second {
				continue
			}
			_ = e.cluster.Client.CoreV1().Pods(testNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
			return
		}
	}()
	res, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: e.image, Argv: []string{"/agent", "await", "/never", "before-delete", "err"}})
	var lost *PodLostError
	if !errors.As(err, &lost) || !errors.Is(err, ErrPodLost) || !errors.Is(err, port.ErrInternal) || !errors.Is(err, port.ErrRemoved) {
		t.Fatalf("err = %v, want a *PodLostError that is port.ErrRemoved", err)
	}
	if res == nil || !strings.Contains(string(res.Stdout), "before-delete") {
		t.Errorf("output before the deletion lost: %+v", res)
	}
	if l, err := e.leftovers(ctx, runID); err != nil || len(l) > 0 {
		t.Errorf("left: %v %v", l, err)
	}
}

// TestManyRuns runs 100 sandboxes (SANDBOX_KUBE_RUNS), 4 at a time, requires every one
// to succeed with its own output, and nothing of the owner to be left in the cluster
// afterwards, nor in the cluster's containerd once the kubelet has collected the
// containers of the deleted Pods.
func TestManyRuns(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	n := testenv.Count("SANDBOX_KUBE_RUNS", 100)
	const par = 4
	start := time.Now()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			want := fmt.Sprintf("run-%d", i)
			res, err := r.RunOnce(context.Background(), port.RunSpec{
				RunID: sandboxtest.RunID("many"), Image: e.image, Argv: []string{"/agent", "echo", want, "err-" + want},
				Limits: port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 64 << 20},
			})
			if err != nil || string(res.Stdout) != want || string(res.Stderr) != "err-"+want || res.ExitCode != 0 {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s: err=%v res=%+v", want, err, res))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d runs, %d at a time, in %v (%.2f runs/s)", n, par, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	if len(failures) > 0 {
		t.Fatalf("%d of %d runs failed:\n%s", len(failures), n, strings.Join(failures, "\n"))
	}
	ctx := context.Background()
	pods, err := e.cluster.Client.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{port.LabelOwner: e.owner}.String()})
	if err != nil || len(pods.Items) > 0 {
		t.Errorf("pods left: %d (%v)", len(pods.Items), err)
	}
	// The kubelet removes the containers of deleted Pods in its own time (its
	// container garbage collection runs every minute): wait for it, bounded.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		left, err := e.cluster.Containers(ctx, func(l map[string]string) bool {
			return l["io.kubernetes.pod.namespace"] == testNamespace && strings.HasPrefix(l["io.kubernetes.pod.name"], podPrefix+"many-")
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("containerd still holds %d containers of the runs: %v", len(left), left[:min(5, len(left))])
			break
		}
		time.Sleep(2 * time.Second)
	}
}
