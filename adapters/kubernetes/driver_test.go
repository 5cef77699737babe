package kubernetes

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/agentsandbox/sandbox/port"
)

// kubeconfig writes a kubeconfig naming a cluster at server, and returns its path.
func kubeconfig(t *testing.T, server string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "` + server + `"}
users:
- name: u
  user: {token: not-a-secret}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTargets: a kubernetes:// target's kubeconfig, namespace, pids and pull reach
// the runner with the host's owner and runtime, the network init is built and given
// to it, and no cluster is asked anything; a target with a host or path, an unknown
// query, no or a bad pids=, a kubeconfig that cannot be read or a load= runtime
// that is not registered is refused.
func TestTargets(t *testing.T) {
	ctx := context.Background()
	kc := url.QueryEscape(kubeconfig(t, "https://127.0.0.1:1"))
	rt, err := port.OpenRuntime(ctx, "kubernetes://?kubeconfig="+kc+"&namespace=agents&pids=runtime&pull=Never", port.RuntimeConfig{Owner: "targets", Runtime: "gvisor"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	c := rt.(*Runner).cfg
	if c.restConfig == nil || c.restConfig.Host != "https://127.0.0.1:1" || c.namespace != "agents" || !c.runtimePIDs || c.pullPolicy != corev1.PullNever ||
		c.owner != "targets" || c.runtimeClass != "gvisor" || c.initPath == "" || c.images.Loader != nil {
		t.Errorf("config from the target: %+v", c)
	}
	rt2, err := port.OpenRuntime(ctx, "kubernetes://?kubeconfig="+kc+"&pids=4096", port.RuntimeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	if c := rt2.(*Runner).cfg; c.nodePIDs != 4096 || c.runtimePIDs || c.namespace != "default" || c.owner != port.DefaultOwner {
		t.Errorf("pids=N and the defaults: %+v", c)
	}
	missing := url.QueryEscape(filepath.Join(t.TempDir(), "none"))
	for target, want := range map[string]string{
		"kubernetes://host:6443?kubeconfig=" + kc + "&pids=runtime": "names a host or path",
		"kubernetes:///api?kubeconfig=" + kc + "&pids=runtime":      "names a host or path",
		"kubernetes://?kubeconfig=" + kc + "&region=eu":             `unknown query parameter "region"`,
		"kubernetes://?kubeconfig=" + kc:                            "pids=runtime",
		"kubernetes://?kubeconfig=" + kc + "&pids=many":             `pids="many" is neither runtime nor a number`,
		"kubernetes://?kubeconfig=" + missing + "&pids=runtime":     "no cluster configuration",
	} {
		if _, err := port.OpenRuntime(ctx, target, port.RuntimeConfig{}); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalidSpec saying %q", target, err, want)
		}
	}
	if _, err := port.OpenRuntime(ctx, "kubernetes://?kubeconfig="+kc+"&pids=runtime&load=nosuch%3A%2F%2F", port.RuntimeConfig{}); err == nil || !strings.Contains(err.Error(), "load=nosuch://") {
		t.Errorf("a load= runtime that is not registered: %v", err)
	}
}

// fakeLoader records what it loads.
type fakeLoader struct{ got string }

func (f *fakeLoader) LoadImage(_ context.Context, r io.Reader) ([]string, error) {
	b, err := io.ReadAll(r)
	f.got = string(b)
	return []string{"loaded:1"}, err
}

// TestImageLoader: LoadImage goes through the loader WithImageLoader gave, is
// ErrUnsupported saying what to do without one, a nil loader is refused, and Close
// closes the loader a target opened.
func TestImageLoader(t *testing.T) {
	ctx := context.Background()
	cluster := WithConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if _, err := NewRunner(cluster, WithoutNetworkInit(), WithImageLoader(nil)); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "kubernetes: image loader is nil") {
		t.Errorf("a nil loader: %v", err)
	}
	r, err := NewRunner(cluster, WithoutNetworkInit())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadImage(ctx, strings.NewReader("x")); !errors.Is(err, port.ErrUnsupported) || !strings.Contains(err.Error(), "load=containerd://") {
		t.Errorf("no loader: %v", err)
	}
	f := &fakeLoader{}
	if r, err = NewRunner(cluster, WithoutNetworkInit(), WithImageLoader(f)); err != nil {
		t.Fatal(err)
	}
	if names, err := r.LoadImage(ctx, strings.NewReader("archive")); err != nil || len(names) != 1 || names[0] != "loaded:1" || f.got != "archive" {
		t.Errorf("LoadImage = %v, %v; the loader got %q", names, err, f.got)
	}
	closed := 0
	r.cfg.images.Opened = func() error { closed++; return nil }
	if err := r.Close(); err != nil || closed != 1 {
		t.Errorf("Close = %v, closed the opened loader %d times", err, closed)
	}
}
