package port

import (
	"slices"
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
