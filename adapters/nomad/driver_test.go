package nomad

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// TestTargets: a nomad:// target's address, namespace and region reach the runner
// with the host's owner, runtime and bridge, the init is built and given to it, and
// no cluster is asked anything; a target with a path or an unknown query, a bad
// runtime name or a load= runtime that is not registered is refused.
func TestTargets(t *testing.T) {
	ctx := context.Background()
	rt, err := port.OpenRuntime(ctx, "nomad://127.0.0.1:1?namespace=agents&region=eu", port.RuntimeConfig{Owner: "targets", Runtime: "runsc"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	r := rt.(*Runner)
	if c := r.cfg; c.address != "http://127.0.0.1:1" || c.namespace != "agents" || c.region != "eu" || c.owner != "targets" || c.runtime != "runsc" || c.initPath == "" || c.loader != nil {
		t.Errorf("config from the target: %+v", c)
	}
	rt2, err := port.OpenRuntime(ctx, "nomad://", port.RuntimeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	if c := rt2.(*Runner).cfg; c.address != "" || c.namespace != "" || c.region != "" || c.owner != port.DefaultOwner {
		t.Errorf("nomad:// takes the environment's address and the defaults: %+v", c)
	}
	for target, want := range map[string]string{
		"nomad://127.0.0.1:4646/v1":            "has a path",
		"nomad://127.0.0.1:4646?kubeconfig=x":  `unknown query parameter "kubeconfig"`,
		"nomad://127.0.0.1:4646?runtime=r u n": "runtime",
	} {
		if _, err := port.OpenRuntime(ctx, target, port.RuntimeConfig{}); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalidSpec saying %q", target, err, want)
		}
	}
	if _, err := port.OpenRuntime(ctx, "nomad://127.0.0.1:4646?load=nosuch%3A%2F%2F", port.RuntimeConfig{}); err == nil || !strings.Contains(err.Error(), "load=nosuch://") {
		t.Errorf("a load= runtime that is not registered: %v", err)
	}
}
