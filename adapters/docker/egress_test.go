package docker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// TestEgressEnv: a run with egress gets the proxy and CA variables, over the caller's;
// a run without gets none of them.
func TestEgressEnv(t *testing.T) {
	spec := port.RunSpec{RunID: "r", Image: "i", Env: map[string]string{"HTTPS_PROXY": "http://elsewhere:1", "NO_PROXY": "*", "KEEP": "1"},
		LLM: &port.LLMSocket{HostDir: "/x", Egress: true}}.WithDefaults()
	cfg, _ := sandboxConfig(spec, []string{"a"}, nil, "")
	env := strings.Join(cfg.Env, "\n")
	for k, v := range port.EgressEnv() {
		if !strings.Contains(env, k+"="+v+"\n") && !strings.HasSuffix(env, k+"="+v) {
			t.Errorf("%s=%s missing in %s", k, v, env)
		}
	}
	for _, bad := range []string{"elsewhere", "NO_PROXY=*"} {
		if strings.Contains(env, bad) {
			t.Errorf("caller's %q survived", bad)
		}
	}
	if !strings.Contains(env, "KEEP=1") {
		t.Error("caller's other variables lost")
	}
	spec.LLM.Egress = false
	cfg, _ = sandboxConfig(spec, []string{"a"}, nil, "")
	if env := strings.Join(cfg.Env, "\n"); strings.Contains(env, "NODE_USE_ENV_PROXY") || strings.Contains(env, "SSL_CERT_FILE") {
		t.Errorf("egress variables without egress: %s", env)
	}
	if p := runner.EgressPrefix(spec, []string{"/b", "--"}); len(p) != 2 {
		t.Errorf("prefix without egress: %v", p)
	}
	spec.LLM.Egress = true
	if p := runner.EgressPrefix(spec, []string{"/b", "--"}); strings.Join(p, " ") != "/b -egress 127.0.0.1:3128 --" {
		t.Errorf("prefix with egress: %v", p)
	}
}

// TestProxyRefusesEgress: the nginx proxy has no egress front and says so.
func TestProxyRefusesEgress(t *testing.T) {
	m, err := NewProxyManager(WithUnfilteredBodies())
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Start(context.Background(), port.ProxySpec{RunID: "r", Upstream: "http://127.0.0.1:1", APIKey: "k",
		Egress: &port.EgressPolicy{Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://a.test/"}}}}})
	if !errors.Is(err, port.ErrUnsupported) || !strings.Contains(err.Error(), "egress") {
		t.Fatalf("err = %v", err)
	}
}
