package containerd

import (
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
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
	if env := strings.Join(runEnvList(spec), "\n"); strings.Contains(env, "NODE_USE_ENV_PROXY") {
		t.Errorf("egress variables without egress: %s", env)
	}
}
