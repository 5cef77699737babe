package containerd

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestEgressEnv: a run with egress gets the proxy and CA variables over the caller's
// and the image's (cold runs and pool claims share runEnvList); a run without gets
// none of them.
func TestEgressEnv(t *testing.T) {
	spec := port.RunSpec{Env: map[string]string{"HTTPS_PROXY": "http://elsewhere:1", "KEEP": "1"}, LLM: &port.LLMSocket{HostDir: "/x", Egress: true}}
	img := &imageInfo{}
	img.config.Env = []string{"PATH=/bin", "https_proxy=http://image:1"}
	env := "\n" + strings.Join(runEnv(spec, img), "\n") + "\n"
	for k, v := range port.EgressEnv() {
		if !strings.Contains(env, "\n"+k+"="+v+"\n") {
			t.Errorf("%s=%s missing in %s", k, v, env)
		}
	}
	for _, bad := range []string{"elsewhere", "image:1"} {
		if strings.Contains(env, bad) {
			t.Errorf("%q survived", bad)
		}
	}
	if !strings.Contains(env, "\nKEEP=1\n") || !strings.Contains(env, "\nPATH=/bin\n") {
		t.Errorf("other variables lost: %s", env)
	}
	spec.LLM.Egress = false
	if env := strings.Join(port.EnvList(spec.SandboxEnv()), "\n"); strings.Contains(env, "NODE_USE_ENV_PROXY") {
		t.Errorf("egress variables without egress: %s", env)
	}
}

// TestPoolEgressAtClaim: a warm sandbox claimed by a run with egress gets the bridge's
// egress listener and the proxy variables, with the run's socket directory attached at
// claim time.
func TestPoolEgressAtClaim(t *testing.T) {
	r, image := poolEnv(t, "pool-egress")
	spec := suiteSpec(image)
	spec.LLM = &port.LLMSocket{HostDir: "/"}
	p, err := r.NewPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	waitReady(t, p)

	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, answer := range map[string]string{port.LLMSocketName: "llm", port.EgressSocketName: "egress-of-this-run"} {
		ln, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, name), 0o666); err != nil {
			t.Fatal(err)
		}
		answer := answer
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, answer) })}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	spec.RunID = sandboxtest.RunID("pool-egress")
	spec.LLM = &port.LLMSocket{HostDir: dir, Egress: true}
	spec.Argv = []string{"/agent", "http", "http://" + port.EgressProxyAddr + "/"}
	res, err := p.RunOnce(context.Background(), spec)
	if err != nil {
		t.Fatalf("%v: %s", err, res.Stderr)
	}
	if !strings.Contains(string(res.Stdout), "egress-of-this-run") {
		t.Errorf("the agent did not reach the run's egress socket: %s / %s", res.Stdout, res.Stderr)
	}
	if st := p.Stats(); st.Warm != 1 {
		t.Fatalf("the run was not warm: %+v", st)
	}
	waitReady(t, p)
	spec.RunID = sandboxtest.RunID("pool-egress-env")
	spec.Argv = []string{"/agent", "env"}
	res, err = p.RunOnce(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"HTTPS_PROXY=http://127.0.0.1:3128", "NODE_USE_ENV_PROXY=1", "SSL_CERT_FILE=/llm-sock/egress-ca.pem"} {
		if !strings.Contains(string(res.Stdout), want+"\n") {
			t.Errorf("env lacks %s:\n%s", want, res.Stdout)
		}
	}
}
