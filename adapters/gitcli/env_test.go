package gitcli_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/gitcli"
	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/internal/testsupport/gittest"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/port"
)

const agentPackage = "github.com/agentsandbox/sandbox/internal/testsupport/gittest/agent"

// canaryToken is the remote's token: it must appear nowhere but in the host's git.
const canaryToken = "ghp_CANARY7f3a9c2e1d5b8a4f6e0c9d2b7a1e3f5c"

var built struct {
	once     sync.Once
	exporter string
	ref      string
	archive  []byte
	err      error
}

// artefacts builds the exporter and the test agent's image (once per test binary).
func artefacts(t testing.TB) (exporter, ref string, archive []byte) {
	t.Helper()
	built.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		built.exporter, built.err = gitcli.BuildExporter(ctx, filepath.Join(os.TempDir(), "agentsandbox-git-export-test"))
		if built.err != nil {
			return
		}
		var bin []byte
		if bin, built.err = agentimage.BuildGo(ctx, agentPackage); built.err != nil {
			return
		}
		img := agentimage.Static("agentsandbox/gitagent", bin)
		img.Labels = map[string]string{agentimage.TestImageLabel: "gitcli"}
		built.ref, built.archive, built.err = img.Archive()
	})
	if built.err != nil {
		t.Fatalf("building the exporter and agent: %v", built.err)
	}
	return built.exporter, built.ref, built.archive
}

type runtimeEnv struct {
	name   string
	runner port.SandboxRunner
	image  string
}

// runtimes returns every runtime the machine has (skipping, or failing in CI, when
// one is missing), each with the test agent's image loaded.
func runtimes(t testing.TB) []runtimeEnv {
	t.Helper()
	testenv.NeedCommand(t, "git", "git")
	_, ref, archive := artefacts(t)
	ctx := context.Background()
	var out []runtimeEnv
	bridgeBin := testenv.Bridge(t)

	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	if err == nil {
		t.Cleanup(func() { cli.Close() })
		if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
			t.Fatal(err)
		}
		r, err := docker.NewRunner(docker.WithClient(cli), docker.WithBridge(bridgeBin), docker.WithOwner(testenv.Owner("gitrelay-test")))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, runtimeEnv{"docker", r, ref})
	} else if testenv.Required("docker") {
		t.Fatalf("docker is required: %v", err)
	}

	cr, err := containerd.NewRunner(containerd.WithNamespace("agentsandbox-test"), containerd.WithBridge(bridgeBin), containerd.WithOwner(testenv.Owner("gitrelay-test")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cr.Close() })
	if perr := cr.Ping(ctx); perr == nil {
		if _, err := cr.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
			t.Fatal(err)
		}
		out = append(out, runtimeEnv{"containerd", cr, ref})
	} else if testenv.Required("containerd") {
		t.Fatalf("containerd is required: %v", perr)
	}
	testenv.Need(t, "docker", len(out) > 0, "neither Docker nor containerd is reachable")
	return out
}

// fixture is a git server with one seeded repository, a relay on a runtime, and the
// relay's log.
type fixture struct {
	rt    runtimeEnv
	srv   *gittest.Server
	relay *gitcli.Relay
	logs  *testenv.SyncBuffer
	cache string
	repo  string
	url   string
	seed  string
}

func newFixture(t testing.TB, rt runtimeEnv, token string, opts ...gitcli.Option) *fixture {
	t.Helper()
	exporter, _, _ := artefacts(t)
	srv, err := gittest.NewServer(t.TempDir(), canaryToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	seed, err := srv.CreateRepo("acme/widgets", map[string]string{"README.md": "# project\n", ".github/workflows/ci.yml": "on: push\n", "src/main.go": "package main\n"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{rt: rt, srv: srv, logs: &testenv.SyncBuffer{}, cache: t.TempDir(), repo: "acme/widgets", url: srv.RepoURL("acme/widgets"), seed: seed}
	base := []gitcli.Option{
		gitcli.WithCacheDir(f.cache),
		gitcli.WithExporter(exporter),
		gitcli.WithLogger(slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		gitcli.WithCredentials(func(ctx context.Context, url string) (gitcli.Credential, error) {
			return gitcli.Credential{Username: "x-access-token", Password: token}, nil
		}),
	}
	f.relay, err = gitcli.NewRelay(rt.runner, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// workspace returns a fresh, empty workspace directory.
func workspace(t testing.TB) string {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return ws
}
