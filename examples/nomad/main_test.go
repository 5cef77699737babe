package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/nomad/nomadlocal"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// TestLocalCluster runs the example as `-local` does: a cluster of its own, the
// quickstart agent on it, its LLM call through the sidecar proxy, reconciled.
func TestLocalCluster(t *testing.T) {
	_, err := nomadlocal.Binary()
	testenv.Need(t, "nomad", err == nil, "no nomad binary")
	testenv.NeedCommand(t, "docker", "docker")
	var out bytes.Buffer
	if err := run(&out, "", true, "MARKER:from-the-test hi", false); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, want := range []string{"agent exit code 0", "answer: ECHO:from-the-test", "audit (1 LLM calls", "POST /v1/chat/completions -> 200", "reconciled usage: 1 calls", "missing: []"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
