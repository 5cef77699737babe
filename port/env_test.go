package port

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestSandboxEnvLibraryWins(t *testing.T) {
	spec := RunSpec{Env: map[string]string{"OPENAI_BASE_URL": "http://evil/v1", "HOSTNAME": "x", "KEEP": "1"}}
	env := spec.SandboxEnv()
	if env["HOSTNAME"] != SandboxHostname || env["KEEP"] != "1" || env["OPENAI_BASE_URL"] != "http://evil/v1" {
		t.Errorf("without LLM access: %v", env)
	}
	spec.LLM = &LLMSocket{HostDir: "/run/x"}
	env = spec.SandboxEnv()
	want := map[string]string{
		"OPENAI_API_BASE": "http://127.0.0.1:8080", "OPENAI_BASE_URL": "http://127.0.0.1:8080/v1",
		"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080", "OPENAI_API_KEY": PlaceholderAPIKey,
		"ANTHROPIC_API_KEY": PlaceholderAPIKey, "HOSTNAME": SandboxHostname, "KEEP": "1",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	if len(spec.Env) != 3 || spec.Env["OPENAI_BASE_URL"] != "http://evil/v1" {
		t.Errorf("SandboxEnv changed the spec's map: %v", spec.Env)
	}
}

func TestEnvListAndMerge(t *testing.T) {
	if got := EnvList(map[string]string{"B": "2", "A": "1=x"}); !slices.Equal(got, []string{"A=1=x", "B=2"}) {
		t.Errorf("EnvList = %v", got)
	}
	got := MergeEnv([]string{"PATH=/bin", "HOME=/", "X=old"}, []string{"X=new", "Y=1"})
	if !slices.Equal(got, []string{"PATH=/bin", "HOME=/", "X=new", "Y=1"}) {
		t.Errorf("MergeEnv = %v", got)
	}
}

func TestExecEnvRefusesLibraryVariables(t *testing.T) {
	for _, k := range []string{"HOSTNAME", "OPENAI_BASE_URL", "OPENAI_API_KEY", "HTTPS_PROXY", "SSL_CERT_FILE"} {
		err := ExecSpec{Argv: []string{"/x"}, Env: map[string]string{k: "http://evil"}}.WithDefaults().Validate()
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), k) {
			t.Errorf("exec env %s: err = %v, want ErrInvalidSpec naming it", k, err)
		}
	}
	if err := (ExecSpec{Argv: []string{"/x"}, Env: map[string]string{"MY_VAR": "1"}}).WithDefaults().Validate(); err != nil {
		t.Errorf("exec env MY_VAR: %v", err)
	}
}
