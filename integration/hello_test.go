package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// readmeHello returns the README's first code block, which must be a Go program
// (the hello world the README opens with).
func readmeHello(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)^[^`]*```go\n(.*?)\n```").FindSubmatch(b)
	if m == nil {
		t.Fatal("the README does not open with a ```go block")
	}
	return string(m[1]) + "\n"
}

// helloLines counts the program's lines as a reader does: without the package
// clause, the imports, blank lines and the error checks (`if err != nil {`, its one
// statement and its brace).
func helloLines(src string) int {
	lines := strings.Split(src, "\n")
	n := 0
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case l == "" || strings.HasPrefix(l, "package "):
		case l == "import (":
			for i < len(lines) && strings.TrimSpace(lines[i]) != ")" {
				i++
			}
		case l == "if err != nil {":
			i += 2
		default:
			n++
		}
	}
	return n
}

const helloImage = "agentsandbox/quickstart-agent:latest"

// helloArchive is the quickstart's agent as the hello world names it.
func helloArchive(t *testing.T, ctx context.Context) []byte {
	t.Helper()
	bin, err := agentimage.BuildGo(ctx, "github.com/agentsandbox/sandbox/examples/quickstart/agent")
	if err != nil {
		t.Fatal(err)
	}
	img := agentimage.Static("agentsandbox/quickstart-agent", bin)
	img.Tag, img.Labels = "latest", map[string]string{agentimage.TestImageLabel: "hello"}
	ref, archive, err := img.Archive()
	if err != nil || ref != helloImage {
		t.Fatalf("%s: %v", ref, err)
	}
	return archive
}

// TestHelloWorldFromTheReadme builds the README's first example, as it is, in a
// module of its own and runs it against a (fake) LiteLLM named by LITELLM_URL and
// LITELLM_MASTER_KEY: on Docker, and on containerd with its target string and the
// adapter's import swapped. It prints the agent's answer and the reconciled spend.
func TestHelloWorldFromTheReadme(t *testing.T) {
	src := readmeHello(t)
	if n := helloLines(src); n > 15 {
		t.Errorf("the hello world is %d lines without imports and error checks, over 15", n)
	}
	for _, want := range []string{`sandbox.Open(ctx, "docker://")`, "Reconcile: true", "res.Usage.Total.Spend", `_ "github.com/agentsandbox/sandbox/adapters/docker"`} {
		if !strings.Contains(src, want) {
			t.Fatalf("the hello world lacks %q:\n%s", want, src)
		}
	}
	fake := litellmtest.NewServer()
	defer fake.Close()
	t.Setenv("LITELLM_URL", fake.URL)
	t.Setenv("LITELLM_MASTER_KEY", fake.MasterKey())
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	archive := helloArchive(t, ctx)
	for _, rt := range []struct {
		name string
		need func(*testing.T)
		load func(context.Context, []byte) error
	}{
		{"docker", needDocker, func(ctx context.Context, a []byte) error {
			r, err := docker.NewRunner()
			if err == nil {
				defer r.Close()
				_, err = r.LoadImage(ctx, bytes.NewReader(a))
			}
			return err
		}},
		{"containerd", needContainerd, func(ctx context.Context, a []byte) error {
			r, err := containerd.NewRunner()
			if err == nil {
				defer r.Close()
				_, err = r.LoadImage(ctx, bytes.NewReader(a))
			}
			return err
		}},
	} {
		t.Run(rt.name, func(t *testing.T) {
			rt.need(t)
			if err := rt.load(ctx, archive); err != nil {
				t.Fatal(err)
			}
			prog := strings.NewReplacer(`"docker://"`, `"`+rt.name+`://"`, "adapters/docker", "adapters/"+rt.name).Replace(src)
			keysBefore := len(fake.VirtualKeys())
			dir := outsideModule(t, map[string]string{"main.go": prog})
			out, err := goIn(ctx, t, dir, "run", ".")
			if err != nil {
				t.Fatalf("the hello world failed on %s: %v", rt.name, err)
			}
			// The fake answers "ok" to a message without a marker; the spend is its
			// cost of the call's tokens, from its spend logs.
			if !regexp.MustCompile(`(?m)^ok\nspent \$0\.0000[0-9][1-9] on 1 LLM calls$`).MatchString(out) {
				t.Errorf("output %q: want the answer and the reconciled spend of one call", out)
			}
			if n := len(fake.VirtualKeys()); n != keysBefore {
				t.Errorf("the program left %d virtual keys at LiteLLM", n-keysBefore)
			}
		})
	}
}

// TestHelloWorldLinksOnlyDocker: the README's hello world, which imports only the
// Docker adapter, links no containerd, Nomad or Kubernetes client package.
func TestHelloWorldLinksOnlyDocker(t *testing.T) {
	dir := outsideModule(t, map[string]string{"main.go": readmeHello(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := goIn(ctx, t, dir, "list", "-deps", ".")
	if err != nil {
		t.Fatal(err)
	}
	deps := strings.Fields(out)
	for _, p := range deps {
		for _, banned := range []string{"github.com/containerd/containerd/", "github.com/hashicorp/nomad/", "k8s.io/client-go/", "k8s.io/api/",
			modulePath + "/adapters/containerd", modulePath + "/adapters/nomad", modulePath + "/adapters/kubernetes"} {
			if strings.HasPrefix(p, banned) {
				t.Errorf("the Docker-only hello world links %s", p)
			}
		}
	}
	for _, want := range []string{modulePath, modulePath + "/adapters/docker", "github.com/moby/moby/client"} {
		if !containsString(deps, want) {
			t.Errorf("the hello world does not link %s: the list is not what it seems", want)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
