package docker

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

func TestTargets(t *testing.T) {
	ctx := context.Background()
	for target, host := range map[string]string{
		"docker://":                      "",
		"docker:///var/run/docker.sock":  "unix:///var/run/docker.sock",
		"docker://10.0.0.1:2375":         "tcp://10.0.0.1:2375",
		"docker://?runtime=runsc":        "",
		"docker:///run/d.sock?runtime=x": "unix:///run/d.sock",
	} {
		rt, err := port.OpenRuntime(ctx, target, port.RuntimeConfig{Owner: "targets"})
		if err != nil {
			t.Errorf("%s: %v", target, err)
			continue
		}
		r := rt.(*Runner)
		if r.cfg.host != host || r.Owner() != "targets" {
			t.Errorf("%s: host %q owner %q, want %q", target, r.cfg.host, r.Owner(), host)
		}
		r.Close()
	}
	for target, want := range map[string]string{
		"docker://host:1/var/run/docker.sock": "names both a host and a socket path",
		"docker://?namespace=x":               `unknown query parameter "namespace"`,
	} {
		if _, err := port.OpenRuntime(ctx, target, port.RuntimeConfig{}); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalidSpec saying %q", target, err, want)
		}
	}
}

// Detect finds this machine's engine and says what it is; an engine that does not
// answer is ErrUnavailable naming the address.
func TestDetect(t *testing.T) {
	dockerEnv(t)
	ctx := context.Background()
	info, err := port.DetectRuntime(ctx, "docker://")
	if err != nil || info.Version == "" || !strings.HasPrefix(info.Detail, "Docker "+info.Version+" at ") || len(info.Runtimes) == 0 {
		t.Fatalf("Detect = %+v, %v", info, err)
	}
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	info, err = port.DetectRuntime(ctx, "docker://"+sock)
	if !errors.Is(err, port.ErrUnavailable) || info.Address != "unix://"+sock || !strings.HasPrefix(err.Error(), "unreachable at unix://"+sock+": ") {
		t.Errorf("stopped daemon: %+v, %v", info, err)
	}
}
