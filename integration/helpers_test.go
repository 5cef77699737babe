package integration

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// dockerClient is a client of the local Docker daemon, closed when t ends. It fails
// t (or skips it, unless SANDBOX_REQUIRE names docker) when no daemon answers.
func dockerClient(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{})
		cancel()
	}
	testenv.Need(t, "docker", err == nil, "no Docker daemon reachable")
	t.Cleanup(func() { cli.Close() })
	return cli
}

// probeDockerRunner is a Docker runner with the bridge (and opts) that has the
// probe image (sandboxtest.ProbeImage), and that image's reference.
func probeDockerRunner(t testing.TB, cli *client.Client, opts ...docker.Option) (*docker.Runner, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	runner, err := docker.NewRunner(append([]docker.Option{docker.WithClient(cli), docker.WithBridge(testenv.Bridge(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return runner, ref
}

// probeContainerdRunner is a containerd runner (namespace agentsandbox-test) with
// the bridge (and opts), closed when t ends, that has the probe image; and that
// image's reference. It fails (or skips) t when containerd does not answer.
func probeContainerdRunner(t testing.TB, opts ...containerd.Option) (*containerd.Runner, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	runner, err := containerd.NewRunner(append([]containerd.Option{containerd.WithNamespace("agentsandbox-test"), containerd.WithBridge(testenv.Bridge(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Close() }) // after the parallel subtests, unlike a defer
	perr := runner.Ping(ctx)
	testenv.Need(t, "containerd", perr == nil, "no containerd reachable")
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	return runner, ref
}
