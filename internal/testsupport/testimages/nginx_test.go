package testimages

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// The packed nginx must run in its image: `nginx -V` from a container.
func TestNginxImageRuns(t *testing.T) {
	testenv.NeedCommand(t, "nginx", "nginx")
	docker := testenv.NeedCommand(t, "docker", "docker")
	ctx := context.Background()
	ref, archive, err := NginxArchive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	_, pingErr := cli.Ping(ctx, client.PingOptions{})
	testenv.Need(t, "docker", pingErr == nil, "no Docker daemon")
	if err := EnsureDocker(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(docker, "run", "--rm", "--network", "none", "--read-only", "-u", "101:101", "--entrypoint", "/usr/sbin/nginx", ref, "-V").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nginx version: nginx/") {
		t.Fatalf("nginx -V in the image: %v: %s", err, out)
	}
}
