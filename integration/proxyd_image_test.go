package integration

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// TestProxydImageRunsAsAContainer: the daemon's scratch image, loaded without a
// registry, runs under Docker and serves a run registered from the host.
func TestProxydImageRunsAsAContainer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cli := dockerClient(t)
	dockerBin := testenv.NeedCommand(t, "docker", "docker")
	ref, archive, err := proxyd.Image(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "pxi")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	name := "agentsandbox-proxyd-test-" + filepath.Base(dir)
	out, err := exec.CommandContext(ctx, dockerBin, "run", "-d", "--rm", "--name", name, "--network", "host",
		"--label", port.LabelOwner+"=proxyd-image-test", "-v", dir+":"+dir, ref,
		"-state-dir", dir+"/state", "-socket-dir", dir+"/runs", "-admin-socket", dir+"/admin.sock").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v %s", err, out)
	}
	defer func() {
		if t.Failed() {
			logs, _ := exec.Command(dockerBin, "logs", name).CombinedOutput()
			t.Logf("daemon log:\n%s", logs)
		}
		_ = exec.Command(dockerBin, "rm", "-f", name).Run()
	}()
	c, err := proxyd.NewClient(dir + "/admin.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Health(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the containerised daemon is not healthy: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fake := litellmtest.NewServer()
	defer fake.Close()
	m, err := proxyd.NewManager(c)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.StartProxy(ctx, port.ProxySpec{RunID: "image-run", Upstream: fake.URL, APIKey: fake.MasterKey(),
		Attribution: port.Attribution{BillingAccountID: "acct-image"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := p.Registration()
	hc := runHTTP(reg.SocketPath, reg.Token)
	st, id, err := call(ctx, hc)
	if err != nil || st != http.StatusOK || id == "" {
		t.Fatalf("call through the containerised daemon: %d %q %v", st, id, err)
	}
	audit, err := p.Stop(ctx)
	if err != nil || len(audit) != 1 || audit[0].CallID != id {
		t.Fatalf("audit %+v %v", audit, err)
	}
	if rs := fake.Requests(); len(rs) != 1 || !strings.HasSuffix(rs[0].Header.Get("Authorization"), fake.MasterKey()) {
		t.Errorf("upstream saw %+v", rs)
	}
}
