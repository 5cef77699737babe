package docker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// A missing nginx image says how to get one, and leaves nothing behind.
func TestProxyMissingImageSaysHowToGetIt(t *testing.T) {
	m, _, _, _ := proxyEnv(t, "noimage")
	const ref = "agentsandbox/no-such-nginx:missing"
	m.cfg.proxy.image = ref
	runID := sandboxtest.RunID("noimage")
	_, err := m.Start(context.Background(), port.ProxySpec{
		RunID: runID, Upstream: "http://127.0.0.1:9", APIKey: "k", Attribution: port.Attribution{BillingAccountID: "a"},
	})
	if !errors.Is(err, port.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	for _, want := range []string{ref, "docker pull " + ref, "agentimage.Nginx", "WithProxyImage"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	cli, _ := dockerEnv(t)
	if left, _ := leftovers(cli)(context.Background(), runID); len(left) > 0 {
		t.Errorf("failed start left %v", left)
	}
}
