package main

import (
	"bytes"
	"net/url"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/kubernetes/kubelocal"
	"github.com/agentsandbox/sandbox/adapters/nomad/nomadlocal"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// TestOneProgramFourRuntimes runs the program on Docker, containerd, a Nomad
// cluster and a Kubernetes cluster (both local, started here) by changing only its
// target string: the same agent answers, and the Result's fields print the same.
// About 2 min on a quiet 2-core machine, most of it the clusters' start.
func TestOneProgramFourRuntimes(t *testing.T) {
	nomadBin, nerr := nomadlocal.Binary()
	testenv.Need(t, "nomad", nerr == nil, "no nomad binary")
	_, kerr := kubelocal.BinDir()
	testenv.Need(t, "kubernetes", kerr == nil, "no Kubernetes binaries")
	// The clusters' locks, which other packages' tests may hold for minutes, are not
	// what this test measures.
	ctx, cancel := testenv.UntimedContext(t)
	defer cancel()

	nc, err := nomadlocal.Start(ctx, nomadlocal.Options{Bin: nomadBin})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	kc, err := kubelocal.Start(ctx, kubelocal.Options{Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()

	nomadTarget := "nomad://" + strings.TrimPrefix(nc.Addr, "http://") + "?" + url.Values{"load": {"docker://"}}.Encode()
	kubeTarget := "kubernetes://?" + url.Values{
		"kubeconfig": {kc.Kubeconfig}, "pids": {"runtime"}, "runtime": {kubelocal.RuntimeClassRunc},
		"load": {"containerd://" + kc.ContainerdSocket + "?namespace=k8s.io"},
	}.Encode()
	outputs := map[string]string{}
	for _, target := range []string{"docker://", "containerd://", nomadTarget, kubeTarget} {
		var out bytes.Buffer
		if err := run(&out, target, "MARKER:same-everywhere hi"); err != nil {
			t.Fatalf("%s: %v\n%s", target, err, out.String())
		}
		outputs[target] = out.String()
		t.Logf("%s:\n%s", target, out.String())
	}
	want := outputs["docker://"]
	for _, line := range []string{"exit code: 0", "answer: ECHO:same-everywhere", "llm calls audited: 1, refused: 0", "POST /v1/chat/completions -> 200", "reconciled: 1 calls", "missing: []", "attested: violations []"} {
		if !strings.Contains(want, line) {
			t.Errorf("docker's output lacks %q", line)
		}
	}
	for target, got := range outputs {
		if got != want {
			t.Errorf("%s printed another Result than Docker:\n%s\nwant:\n%s", target, got, want)
		}
	}
}
