package nomad

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestEnvVerbatim: values Nomad would interpolate (${NOMAD_...}, ${node...}, ${env})
// reach the agent as given, through the init; without the init, and in argv, they are
// refused with ErrUnsupported rather than changed. About 3 s.
func TestEnvVerbatim(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	values := map[string]string{
		"TASK": "${NOMAD_TASK_NAME}", "NODE": "a ${node.unique.id} b", "MIXED": "$${x} ${ and $HOME",
		"PLAIN": "no interpolation here",
	}
	spec := port.RunSpec{RunID: sandboxtest.RunID("env-verbatim"), Image: e.image, Argv: []string{"/agent", "env"}, Env: values, Limits: port.Limits{Timeout: time.Minute}}
	res, err := r.RunOnce(ctx, spec)
	if err != nil {
		t.Fatalf("%v: %+v", err, res)
	}
	got := map[string]string{}
	for _, l := range strings.Split(string(res.Stdout), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	for k, want := range values {
		if got[k] != want {
			t.Errorf("%s = %q in the sandbox, want %q verbatim", k, got[k], want)
		}
	}
	if left, err := e.leftovers(r)(ctx, spec.RunID); err != nil || len(left) > 0 {
		t.Errorf("left behind: %v %v", left, err)
	}

	noInit, err := NewRunner(WithAddress(e.cluster.Addr), WithOwner(e.owner), WithBridge(e.bridge))
	if err != nil {
		t.Fatal(err)
	}
	spec.RunID = sandboxtest.RunID("env-noinit")
	if _, err := noInit.RunOnce(ctx, spec); !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("without the init: %v, want ErrUnsupported", err)
	}
	spec.Env = nil
	spec.Argv = []string{"/agent", "argv", "${NOMAD_TASK_NAME}"}
	if _, err := r.RunOnce(ctx, spec); !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("${ in argv: %v, want ErrUnsupported", err)
	}
}
