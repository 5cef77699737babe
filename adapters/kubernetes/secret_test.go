package kubernetes

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// systemNamespace holds the proxy daemon and its Secret, apart from the sandboxes.
const systemNamespace = "agentsandbox-system"

// TestLiteLLMKeyOnlyInTheDaemon deploys the shared proxy daemon as the DaemonSet of
// ProxyDaemon with a canary LiteLLM key in a Secret of its own namespace, registers a
// run without a key (the host never has it), and proves: the agent's call reaches
// LiteLLM with the key; the agent's Pod, as submitted, holds neither the key nor a
// Secret; a scan inside the running agent (env, every file, /proc/*/environ, cmdline
// and mountinfo) finds nothing, while the same scan finds a planted copy; and no
// identity the agent could act as (its namespace's service account, anonymous) nor
// the runner can read the Secret; a run through the facade with LLM.KeyInProxy (the
// host without the key) works. About 15 s on a quiet 2-core machine (the daemon's
// image build is cached after the first run).
func TestLiteLLMKeyOnlyInTheDaemon(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin := e.cluster.Client
	key := "sk-canary-" + randHex(16)
	fake := litellmtest.NewServer(litellmtest.WithMasterKey(key))
	defer fake.Close()

	ref, archive, err := proxyd.Image(ctx)
	if err == nil {
		err = e.cluster.ImportImage(ctx, archive)
	}
	if err != nil {
		t.Fatalf("the daemon's image: %v", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	secretName := "litellm-" + randHex(4)
	sec, err := KeySecret(systemNamespace, secretName, e.owner, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets(systemNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Secrets(systemNamespace).Delete(context.Background(), secretName, metav1.DeleteOptions{})
	})
	d := ProxyDaemon{Namespace: systemNamespace, Name: "proxyd-" + randHex(4), Image: ref, PullPolicy: corev1.PullNever,
		Dir: testenv.ShortDir(t, "kpd"), KeySecret: secretName, Owner: e.owner}
	startProxyDaemonSet(t, admin, d)

	client, err := proxyd.NewClient(d.AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	waitDaemon(ctx, t, admin, d, client)
	m, err := proxyd.NewManager(client, proxyd.WithSandboxUID(1001))
	if err != nil {
		t.Fatal(err)
	}
	runID := sandboxtest.RunID("keyless")
	// No APIKey: the daemon injects the one from its Secret; the host never had it.
	p, err := m.StartProxy(ctx, port.ProxySpec{RunID: runID, Attempt: 1, Upstream: fake.URL,
		Attribution: port.Attribution{BillingAccountID: "acct-keyless"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	sock := p.Socket()
	r := e.runner(t)
	run := func(argv ...string) *port.RunResult {
		t.Helper()
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: e.image, LLM: &sock, Argv: append([]string{"/agent"}, argv...),
			Limits: port.Limits{Timeout: time.Minute}})
		if err != nil {
			t.Fatalf("RunOnce %v: %v", argv, err)
		}
		return res
	}
	if res := run("chat", "gpt-4o-mini", "MARKER:keyless"); res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "ECHO:keyless") {
		t.Fatalf("the call with the daemon's key: exit %d\n%s\n%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	// The key goes in as two halves the agent joins in memory, so the scan's own
	// command line does not hold it.
	if res := run("scan", key[:len(key)/2], key[len(key)/2:]); res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "clean" {
		t.Errorf("the key is visible in the agent's Pod: exit %d\n%s", res.ExitCode, res.Stdout)
	}
	ctl, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: e.image, LLM: &sock, Env: map[string]string{"PLANTED": key},
		Argv: []string{"/agent", "scan", key[:len(key)/2], key[len(key)/2:]}})
	if err != nil || ctl.ExitCode != 5 || !strings.Contains(string(ctl.Stdout), "found in env") {
		t.Errorf("the scan missed a planted key: %v %+v", err, ctl)
	}

	// The agent's Pod as the runner submits it: no Secret, no key anywhere in it.
	spec := port.RunSpec{RunID: runID, Image: e.image, LLM: &sock, Argv: []string{"/agent", "id"}}.WithDefaults()
	pod := r.buildPod(spec, podSpec{name: podName(runID), created: time.Now()})
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), key) || strings.Contains(string(b), secretName) {
		t.Errorf("the agent's Pod names the key or its Secret: %s", b)
	}
	// The only Pods that mount the Secret are the daemon's.
	all, err := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all.Items {
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == secretName && (p.Namespace != systemNamespace || !strings.HasPrefix(p.Name, d.Name+"-")) {
				t.Errorf("pod %s/%s mounts the key's Secret", p.Namespace, p.Name)
			}
		}
	}

	// Who could read it through the API: the agent has no token (TestPodSpecLockdown),
	// so it could at best act as anonymous or as its namespace's service account; the
	// runner's own identity cannot either.
	for who, imp := range map[string]rest.ImpersonationConfig{
		"the sandboxes' service account": {UserName: "system:serviceaccount:" + testNamespace + ":default", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + testNamespace, "system:authenticated"}},
		"anonymous":                      {UserName: "system:anonymous", Groups: []string{"system:unauthenticated"}},
		"the runner":                     e.restricted.Impersonate,
	} {
		cfg := rest.CopyConfig(e.cluster.Config)
		cfg.Impersonate = imp
		cli, err := k8s.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.CoreV1().Secrets(systemNamespace).Get(ctx, secretName, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s gets the key's Secret: err = %v, want Forbidden", who, err)
		}
		for _, ns := range []string{systemNamespace, testNamespace} {
			if _, err := cli.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("%s lists the Secrets of %s: err = %v, want Forbidden", who, ns, err)
			}
		}
		if _, err := cli.CoreV1().Pods(systemNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s lists the daemon's Pods: err = %v, want Forbidden", who, err)
		}
	}
	if len(fake.Requests()) == 0 {
		t.Error("the fake LiteLLM saw no call")
	}

	// The same through the facade, as a host application writes it: it never has the
	// key (KeyInProxy), the daemon injects it.
	sb, err := sandbox.New(r, sandbox.WithLLM(sandbox.LLM{Proxy: m, Upstream: fake.URL, KeyInProxy: true}))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := sandbox.NewWorkspace("", "")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Remove()
	out, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("facade"), Image: e.image,
		Argv: []string{"/agent", "chat", "gpt-4o-mini", "MARKER:facade"}, WorkspaceDir: ws.Dir(),
		Messages: []sandbox.Message{{Role: "user", Content: "hi"}}, Model: "gpt-4o-mini",
		Attribution: port.Attribution{BillingAccountID: "acct-facade"}, Limits: port.Limits{Timeout: time.Minute},
	})
	if err != nil || out.Run.ExitCode != 0 || !strings.Contains(out.Text, "ECHO:facade") || len(out.Audit) != 1 || out.Audit[0].Status != 200 {
		t.Errorf("a facade run with the daemon's key: %v %+v", err, out)
	}
}

// startProxyDaemonSet creates d's DaemonSet; the test's cleanup deletes it and waits
// until its Pods are gone.
func startProxyDaemonSet(t *testing.T, admin k8s.Interface, d ProxyDaemon) {
	t.Helper()
	ds, err := d.DaemonSet()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AppsV1().DaemonSets(d.Namespace).Create(context.Background(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		fg := metav1.DeletePropagationForeground
		if err := admin.AppsV1().DaemonSets(d.Namespace).Delete(ctx, d.Name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
			t.Errorf("deleting the daemon: %v", err)
		}
		sel := labels.SelectorFromSet(ds.Spec.Selector.MatchLabels).String()
		for {
			pods, err := admin.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err == nil && len(pods.Items) == 0 {
				return
			}
			if ctx.Err() != nil {
				t.Errorf("the daemon's Pods outlive it: %v", err)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// waitDaemon waits until the daemon's admin socket answers, or fails with its Pods'
// state and logs.
func waitDaemon(ctx context.Context, t *testing.T, admin k8s.Interface, d ProxyDaemon, c *proxyd.Client) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Health(hctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			pods, _ := admin.CoreV1().Pods(d.Namespace).List(context.Background(), metav1.ListOptions{})
			for _, p := range pods.Items {
				logs, _ := admin.CoreV1().Pods(d.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
				t.Logf("pod %s: %+v\n%s", p.Name, p.Status, logs)
			}
			t.Fatalf("the daemon is not healthy: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
