package kubernetes

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// TestAttestKeyOnlyForTheBridge: the agent container's environment holds the run's
// attestation key for the init to keep and pass to the bridge (which takes it out
// before the agent starts); without the runner's bridge there is none.
func TestAttestKeyOnlyForTheBridge(t *testing.T) {
	key := bridgeapi.NewAttestKey()
	spec := port.RunSpec{RunID: "r1", Image: "img", Argv: []string{"/agent"}, LLM: &port.LLMSocket{HostDir: "/run/x", AttestKey: key}}.WithDefaults()
	for _, bridge := range []bool{true, false} {
		opts := []Option{WithClient(fake.NewClientset()), WithInit("/init")}
		if bridge {
			opts = append(opts, WithBridge("/bridge"))
		}
		r, err := NewRunner(opts...)
		if err != nil {
			t.Fatal(err)
		}
		cmd, env := r.agentCommand(spec, podSpec{name: "p", created: time.Now()})
		i := slices.Index(cmd, "-keep")
		kept := i >= 0 && slices.Contains(strings.Split(cmd[i+1], ","), bridgeapi.AttestKeyEnv)
		var got string
		for _, e := range env {
			if e.Name == bridgeapi.AttestKeyEnv {
				got = e.Value
			}
		}
		if bridge && (got != key || !kept) {
			t.Errorf("with the bridge: key %q kept %v %v", got, kept, cmd)
		}
		if !bridge && (got != "" || kept) {
			t.Errorf("without the runner's bridge the key is in the pod: %q %v", got, cmd)
		}
		if strings.Contains(strings.Join(cmd, " "), key) {
			t.Errorf("the key is on the command line: %v", cmd)
		}
	}
}
