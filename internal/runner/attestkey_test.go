package runner

import (
	"testing"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// TestBridgeEnvCarriesTheKeyForTheBridgeOnly: the key is in the sandbox's
// environment only with LLM access and the runner's bridge, and winning over a
// caller's variable of the same name; a session's exec blanks it.
func TestBridgeEnvCarriesTheKeyForTheBridgeOnly(t *testing.T) {
	key := bridgeapi.NewAttestKey()
	spec := port.RunSpec{Env: map[string]string{bridgeapi.AttestKeyEnv: "callers", "A": "1"}, LLM: &port.LLMSocket{HostDir: "/x", AttestKey: key}}
	if got := BridgeEnv(spec, true); got[bridgeapi.AttestKeyEnv] != key || got["A"] != "1" {
		t.Errorf("with the bridge: %v", got)
	}
	if got := BridgeEnv(spec, false); got[bridgeapi.AttestKeyEnv] != "callers" {
		t.Errorf("an image's own bridge got the key: %v", got)
	}
	spec.LLM = nil
	if got := BridgeEnv(spec, true); got[bridgeapi.AttestKeyEnv] != "callers" {
		t.Errorf("no LLM access: %v", got)
	}
	in := map[string]string{"B": "2"}
	if got := ExecEnv(in); got[bridgeapi.AttestKeyEnv] != "" || len(got) != 2 || got["B"] != "2" || len(in) != 1 {
		t.Errorf("exec env %v (input %v)", got, in)
	}
	if v, ok := ExecEnv(nil)[bridgeapi.AttestKeyEnv]; !ok || v != "" {
		t.Error("the exec's environment does not blank the key")
	}
}
