package containerd

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
	for target, want := range map[string][2]string{
		"containerd://":                                            {defaultConfig().address, DefaultNamespace},
		"containerd:///run/c/c.sock":                               {"/run/c/c.sock", DefaultNamespace},
		"containerd:///run/c/c.sock?namespace=k8s.io":              {"/run/c/c.sock", "k8s.io"},
		"containerd://?namespace=ns&runtime=runsc":                 {defaultConfig().address, "ns"},
		"containerd:///run/containerd/containerd.sock?namespace=a": {"/run/containerd/containerd.sock", "a"},
	} {
		rt, err := port.OpenRuntime(ctx, target, port.RuntimeConfig{Owner: "targets"})
		if err != nil {
			t.Errorf("%s: %v", target, err)
			continue
		}
		r := rt.(*Runner)
		if r.cfg.address != want[0] || r.cfg.namespace != want[1] || r.cfg.owner != "targets" {
			t.Errorf("%s: address %q namespace %q, want %v", target, r.cfg.address, r.cfg.namespace, want)
		}
		r.Close()
	}
	for target, want := range map[string]string{
		"containerd://host/run/c.sock":    "names a host",
		"containerd://?ns=x":              `unknown query parameter "ns"`,
		"containerd://?namespace=a%20b":   "not a valid containerd namespace",
		"containerd://?runtime=/bin/runc": "not a runtime name",
	} {
		if _, err := port.OpenRuntime(ctx, target, port.RuntimeConfig{}); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalidSpec saying %q", target, err, want)
		}
	}
}

// Detect finds this machine's containerd and says what it is; a socket nobody
// listens on is ErrUnavailable naming it.
func TestDetect(t *testing.T) {
	runnerEnv(t)
	ctx := context.Background()
	info, err := port.DetectRuntime(ctx, "containerd://")
	if err != nil || info.Version == "" || info.Detail != "containerd "+info.Version+" at "+info.Address {
		t.Fatalf("Detect = %+v, %v", info, err)
	}
	sock := filepath.Join(t.TempDir(), "c.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	info, err = port.DetectRuntime(ctx, "containerd://"+sock)
	if !errors.Is(err, port.ErrUnavailable) || info.Address != sock || !strings.HasPrefix(err.Error(), "unreachable at "+sock+": ") {
		t.Errorf("stopped daemon: %+v, %v", info, err)
	}
	if _, err := port.DetectRuntime(ctx, "containerd://"+sock+".none"); !errors.Is(err, port.ErrUnavailable) || !strings.Contains(err.Error(), "no socket at") {
		t.Errorf("no socket: %v", err)
	}
}
