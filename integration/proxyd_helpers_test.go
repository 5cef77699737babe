package integration

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
)

// proxydProc is the shared proxy daemon running as its own process, as in production.
type proxydProc struct {
	t      testing.TB
	bin    string
	dir    string
	args   []string
	client *proxyd.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	exited chan struct{}
}

func buildProxyd(t testing.TB) string {
	ctx, cancel := testenv.UntimedContext(t)
	defer cancel()
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	bin, err := gobuild.Cached(ctx, "github.com/agentsandbox/sandbox/cmd/sandbox-proxyd", "sandbox-proxyd", filepath.Join(base, "agentsandbox", "proxyd"))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// startProxyd starts the daemon in a fresh short directory (socket paths must stay short).
func startProxyd(t testing.TB, extra ...string) *proxydProc {
	t.Helper()
	dir, err := os.MkdirTemp("", "pxd")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxydProc{t: t, bin: buildProxyd(t), dir: dir}
	p.args = append([]string{"-state-dir", filepath.Join(dir, "state"), "-socket-dir", filepath.Join(dir, "runs"),
		"-admin-socket", filepath.Join(dir, "admin.sock"), "-v"}, extra...)
	if p.client, err = proxyd.NewClient(filepath.Join(dir, "admin.sock")); err != nil {
		t.Fatal(err)
	}
	p.start()
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		p.client.Close()
		if t.Failed() {
			t.Logf("daemon log:\n%s", p.log())
		}
		os.RemoveAll(dir)
	})
	return p
}

func (p *proxydProc) start() {
	p.t.Helper()
	cmd := exec.Command(p.bin, p.args...)
	var buf bytes.Buffer
	cmd.Stderr = &lockedWriter{w: &buf, mu: &p.mu}
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.stderr, p.exited = cmd, &buf, exited
	p.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.client.Health(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-exited:
			p.t.Fatalf("the daemon exited at start: %s", p.log())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the daemon is not healthy: %v\n%s", err, p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop signals the daemon and waits for it.
func (p *proxydProc) stop(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (p *proxydProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stderr == nil {
		return ""
	}
	return p.stderr.String()
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// leftovers lists what the daemon still holds for a run: registrations and directories.
func (p *proxydProc) leftovers(ctx context.Context, runID string) ([]string, error) {
	var out []string
	runs, err := p.client.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if r.RunID == runID {
			out = append(out, "registration:"+r.ID)
		}
	}
	entries, err := os.ReadDir(filepath.Join(p.dir, "runs"))
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

// proxydHarnessParts is the manager, leftover check and kill of the conformance suite.
func proxydHarnessParts(t testing.TB) (*proxyd.Manager, func(context.Context, string) ([]string, error), func(context.Context, port.Proxy) error) {
	p := startProxyd(t)
	m, err := proxyd.NewManager(p.client, proxyd.WithSandboxUID(1001))
	if err != nil {
		t.Fatal(err)
	}
	// The suite's subtests share the daemon and run in parallel, so a kill of the
	// daemon itself would hit them all; a kill is the run's abrupt end (every call
	// cut at once). TestProxydCrash kills the process.
	kill := func(ctx context.Context, pr port.Proxy) error {
		_, err := pr.(*proxyd.Proxy).Abort(ctx)
		return err
	}
	return m, p.leftovers, kill
}
