package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/kubernetes/kubelocal"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// TestLocalCluster runs the example as `-local` does: a cluster of its own, the
// quickstart agent in a Pod on it, its LLM call through the node-local proxy,
// reconciled. About 40 s on a quiet 2-core machine (most of it the cluster's start and
// teardown).
func TestLocalCluster(t *testing.T) {
	_, err := kubelocal.BinDir()
	testenv.Need(t, "kubernetes", err == nil, "no Kubernetes binaries")
	// The wait for the cluster lock, which another package's tests may hold for
	// minutes, is not what this test measures.
	ctx, cancel := testenv.UntimedContext(t)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, "", "default", true, "MARKER:from-the-test hi", false); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, want := range []string{"agent exit code 0", "answer: ECHO:from-the-test", "audit (1 LLM calls", "POST /v1/chat/completions -> 200", "reconciled usage: 1 calls", "missing: []"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
