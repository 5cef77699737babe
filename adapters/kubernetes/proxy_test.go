package kubernetes

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/internal/gobuild"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// daemon is the shared proxy daemon as the node-local service of the test cluster's one
// node: a host process whose per-run socket directories the Pods mount as hostPaths.
type daemon struct {
	dir    string
	client *proxyd.Client
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
}

func (d *daemon) Write(b []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.Write(b)
}

func startDaemon(t testing.TB) *daemon {
	t.Helper()
	ctx, cancel := testenv.UntimedContext(t)
	defer cancel()
	bin, err := gobuild.Cached(ctx, "github.com/agentsandbox/sandbox/cmd/sandbox-proxyd", "sandbox-proxyd", filepath.Join(os.TempDir(), "agentsandbox-proxyd-kubetest"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kpxd")
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{dir: dir, exited: make(chan struct{})}
	if d.client, err = proxyd.NewClient(filepath.Join(dir, "admin.sock")); err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(bin, "-state-dir", filepath.Join(dir, "state"), "-socket-dir", filepath.Join(dir, "runs"),
		"-admin-socket", filepath.Join(dir, "admin.sock"))
	d.cmd.Stderr = d
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(20 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
		d.client.Close()
		if t.Failed() {
			d.mu.Lock()
			t.Logf("daemon log:\n%s", d.log.String())
			d.mu.Unlock()
		}
		os.RemoveAll(dir)
	})
	for deadline := time.Now().Add(60 * time.Second); ; {
		hctx, hcancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := d.client.Health(hctx)
		hcancel()
		if err == nil {
			return d
		}
		select {
		case <-d.exited:
			t.Fatalf("the daemon exited: %s", d.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon is not healthy: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leftovers lists what the daemon still holds for a run: registrations and directories.
func (d *daemon) leftovers(ctx context.Context, runID string) ([]string, error) {
	var out []string
	runs, err := d.client.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if r.RunID == runID {
			out = append(out, "registration:"+r.ID)
		}
	}
	entries, err := os.ReadDir(filepath.Join(d.dir, "runs"))
	if err != nil && !os.IsNotExist(err) {
		return out, err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), runID+"-") {
			out = append(out, "dir:"+e.Name())
		}
	}
	return out, nil
}

// TestProxyConformance runs the proxy conformance suite with the shared daemon as the
// node-local proxy: the Pods mount each run's socket directory (with its run token)
// read-only from the node, and the bridge inside attests the sandbox first.
func TestProxyConformance(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	d := startDaemon(t)
	m, err := proxyd.NewManager(d.client, proxyd.WithSandboxUID(1001))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{
		Manager: m, Runner: r, Image: e.image, Budget: true, Attestation: true, BodyPolicy: true,
		Kill: func(ctx context.Context, p port.Proxy) error {
			_, err := p.(*proxyd.Proxy).Abort(ctx)
			return err
		},
		Leftovers: func(ctx context.Context, runID string) ([]string, error) {
			l, err := d.leftovers(ctx, runID)
			pl, perr := e.leftovers(ctx, runID)
			if err == nil {
				err = perr
			}
			return append(l, pl...), err
		},
	})
}
