// Package registrytest runs a real container registry for tests: Debian's
// docker-registry (the CNCF distribution registry) on a free loopback port, with its
// own storage directory and htpasswd authentication, stopped when the test ends. Tests
// fill it with the public builder's push (agentimage.Image.Push), so they need no
// engine to do it. Install the parts with scripts/install-registry.sh.
package registrytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// Registry is a running registry.
type Registry struct {
	// Addr is host:port on 127.0.0.1: the registry part of its references.
	Addr string
	// User and Password are the one account htpasswd knows.
	User, Password string
}

// Start starts a registry for t and stops it (and removes its storage) at cleanup.
// It needs docker-registry and htpasswd (scripts/install-registry.sh): missing, the
// test skips, or fails when SANDBOX_REQUIRE names "registry".
func Start(t testing.TB) *Registry {
	t.Helper()
	bin := testenv.NeedCommand(t, "registry", "docker-registry")
	htpasswd := testenv.NeedCommand(t, "registry", "htpasswd")
	dir := t.TempDir()
	pw := make([]byte, 12)
	_, _ = rand.Read(pw)
	r := &Registry{User: "agent-puller", Password: hex.EncodeToString(pw)}
	out, err := exec.Command(htpasswd, "-Bbn", r.User, r.Password).Output()
	if err != nil {
		t.Fatalf("htpasswd: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Addr = l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
auth:
  htpasswd:
    realm: agentsandbox-test
    path: %s
`, filepath.Join(dir, "data"), r.Addr, filepath.Join(dir, "htpasswd"))
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	// The registry dies with the test binary, even one killed outright.
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting docker-registry: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + r.Addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return r
			}
		}
		select {
		case <-exited:
			t.Fatalf("docker-registry exited: %s", logs.Bytes())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer on %s: %v %s", r.Addr, err, logs.Bytes())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Ref is Addr/repo:tag.
func (r *Registry) Ref(repo, tag string) string { return r.Addr + "/" + repo + ":" + tag }

// Credentials are the registry's account, for its host.
func (r *Registry) Credentials() port.RegistryCredentials {
	return port.StaticRegistryCredentials{r.Addr: {Username: r.User, Password: r.Password}}
}

// Push uploads img as repo:tag with the public builder's push (agentimage.Image.Push)
// and returns the manifest's digest, "sha256:...".
func (r *Registry) Push(ctx context.Context, repo, tag string, img agentimage.Image) (string, error) {
	return img.Push(ctx, r.Ref(repo, tag), agentimage.PushOptions{Credentials: r.Credentials()})
}
