package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// This module's import path, and the checkout the throwaway modules replace it with.
const modulePath = "github.com/agentsandbox/sandbox"

// outsideModule writes a throwaway module example.com/outside in a temporary directory
// outside the checkout: it requires this module through a replace directive pointing
// at the checkout, starts from the checkout's go.sum (so nothing is downloaded that
// the checkout's own build did not), and holds files (path -> content).
func outsideModule(t *testing.T, files map[string]string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go [0-9.]+$`).Find(gomod)
	if goLine == nil {
		t.Fatal("the checkout's go.mod has no go line")
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	all := map[string]string{
		"go.mod": "module example.com/outside\n\n" + string(goLine) + "\n\n" +
			"require " + modulePath + " v0.0.0-00010101000000-000000000000\n\n" +
			"replace " + modulePath + " => " + root + "\n",
		"go.sum": string(sum),
	}
	for name, content := range files {
		all[name] = content
	}
	for name, content := range all {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goIn runs the go command in dir, resolving missing requirements from the module
// cache (-mod=mod) and never from a workspace, and returns its combined output. Its
// callers give it testenv.UntimedContext: what it builds is not what they measure (on a
// new, loaded machine a vet of the Kubernetes example took over 5 minutes), and what
// it runs bounds itself (go test -timeout, the examples' own limits).
func goIn(ctx context.Context, t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	goBin := testenv.NeedCommand(t, "go", "go")
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"), "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("go %s in the outside module: %v\n%s", strings.Join(args, " "), err, tail(out.Bytes()))
	return out.String(), err
}

func needDocker(t *testing.T) {
	t.Helper()
	dockerClient(t)
}

func needContainerd(t *testing.T) {
	t.Helper()
	r, err := containerd.NewRunner()
	if err == nil {
		defer r.Close()
		err = r.Ping(context.Background())
	}
	testenv.Need(t, "containerd", err == nil, "no containerd reachable")
}

// outsideRunnerTest is an adapter's test as a user writes it in a module of their
// own: the probe image and the suite come from sandboxtest, the runner is Docker's.
const outsideRunnerTest = `package outside

import (
	"bytes"
	"context"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestDockerRunnerConformance(t *testing.T) {
	ctx := context.Background()
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := docker.NewRunner(docker.WithOwner(outsideOwner))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	leftovers := func(ctx context.Context, runID string) ([]string, error) {
		cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", port.LabelRunID+"="+runID)})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, c := range cs.Items {
			out = append(out, "container:"+c.ID)
		}
		return out, nil
	}
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{Runner: r, Image: ref, Leftovers: leftovers})
}
`

// TestConformanceFromAnotherModule runs the runner conformance suite against the
// Docker runner from a module that is not this one, as the author of an adapter
// outside this repository would: only exported names can be used there.
func TestConformanceFromAnotherModule(t *testing.T) {
	needDocker(t)
	// The outside module cannot import internal/testsupport/testenv: its owner (with this
	// process's tag) is written in.
	src := outsideRunnerTest + "\nconst outsideOwner = " + strconv.Quote(testenv.Owner("outside")) + "\n"
	dir := outsideModule(t, map[string]string{"runner_test.go": src})
	ctx, cancel := testenv.UntimedContext(t)
	defer cancel()
	out, err := goIn(ctx, t, dir, "test", "-count=1", "-v", "-timeout=8m", ".")
	if err != nil {
		t.Fatalf("the suite failed in the outside module: %v", err)
	}
	// Proof that the suite ran there, not that go test found nothing to do.
	for _, want := range []string{"--- PASS: TestDockerRunnerConformance ", "--- PASS: TestDockerRunnerConformance/NetworkIsLoopbackOnly", "--- PASS: TestDockerRunnerConformance/InvalidSpecCreatesNothing"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if strings.Contains(out, "--- SKIP") {
		t.Error("a conformance test skipped in the outside module")
	}
}

// TestQuickstartFromAnotherModule copies examples/quickstart, agent included, verbatim
// into a module of its own and runs it there on both runtimes: the README's main job
// works for a user who starts from a copy.
func TestQuickstartFromAnotherModule(t *testing.T) {
	files := map[string]string{}
	for _, name := range []string{"main.go", "agent/main.go"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", "quickstart", filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		files["quickstart/"+name] = string(b)
	}
	for _, rt := range []struct {
		name string
		need func(*testing.T)
	}{{"docker", needDocker}, {"containerd", needContainerd}} {
		t.Run(rt.name, func(t *testing.T) {
			rt.need(t)
			dir := outsideModule(t, files)
			ctx, cancel := testenv.UntimedContext(t)
			defer cancel()
			out, err := goIn(ctx, t, dir, "run", "./quickstart", "-target", rt.name+"://", "-prompt", "MARKER:outside-"+rt.name+" hello")
			if err != nil {
				t.Fatalf("the copied quickstart failed: %v", err)
			}
			for _, want := range []string{"run on " + rt.name + ":// with agentsandbox/quickstart-agent:latest", "agent exit code 0", "answer: ECHO:outside-" + rt.name, "total: 1 calls", "missing: []"} {
				if !strings.Contains(out, want) {
					t.Errorf("the output lacks %q", want)
				}
			}
		})
	}
}

// TestNomadExampleFromAnotherModule copies examples/nomad verbatim into a module of
// its own and builds and vets it there: it uses only the library's public API. (Its
// run on a local cluster is examples/nomad's own test.)
func TestNomadExampleFromAnotherModule(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "examples", "nomad", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	dir := outsideModule(t, map[string]string{"nomadexample/main.go": string(b)})
	ctx, cancel := testenv.UntimedContext(t)
	defer cancel()
	if _, err := goIn(ctx, t, dir, "vet", "./nomadexample"); err != nil {
		t.Fatalf("the copied Nomad example does not vet: %v", err)
	}
	if _, err := goIn(ctx, t, dir, "build", "-o", filepath.Join(t.TempDir(), "nomadexample"), "./nomadexample"); err != nil {
		t.Fatalf("the copied Nomad example does not build: %v", err)
	}
}

// TestKubernetesExampleFromAnotherModule copies examples/kubernetes verbatim into a
// module of its own and builds and vets it there: it uses only the library's public
// API, its -local cluster included (adapters/kubernetes/kubelocal). (Its run on a
// local cluster is examples/kubernetes's own test.)
func TestKubernetesExampleFromAnotherModule(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "examples", "kubernetes", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(modulePath+"/internal/")) {
		t.Fatal("examples/kubernetes imports an internal package")
	}
	dir := outsideModule(t, map[string]string{"kubeexample/main.go": string(b)})
	ctx, cancel := testenv.UntimedContext(t)
	defer cancel()
	if _, err := goIn(ctx, t, dir, "vet", "./kubeexample"); err != nil {
		t.Fatalf("the copied Kubernetes example does not vet: %v", err)
	}
	if _, err := goIn(ctx, t, dir, "build", "-o", filepath.Join(t.TempDir(), "kubeexample"), "./kubeexample"); err != nil {
		t.Fatalf("the copied Kubernetes example does not build: %v", err)
	}
}
