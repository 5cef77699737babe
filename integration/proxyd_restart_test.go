package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestProxydRestartUnderALiveSandboxDocker(t *testing.T) {
	testProxydRestartUnderALiveSandbox(t, dockerRunner)
}

func TestProxydRestartUnderALiveSandboxContainerd(t *testing.T) {
	testProxydRestartUnderALiveSandbox(t, containerdRunner)
}

// testProxydRestartUnderALiveSandbox: a sandbox makes a call, the daemon is
// killed (SIGKILL) and started again while the sandbox lives, and the sandbox's
// next calls go through the new socket at the same path (its bind mount is the
// directory), with the same token, under the same budget, and with the
// attestation the bridge sent before the restart (the run requires one).
func testProxydRestartUnderALiveSandbox(t *testing.T, newRunner func(testing.TB, string) (port.SandboxRunner, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin)
	fake := litellmtest.NewServer()
	defer fake.Close()
	d := startProxyd(t)
	m, err := proxyd.NewManager(d.client, proxyd.WithSandboxUID(1001))
	if err != nil {
		t.Fatal(err)
	}
	runID := sandboxtest.RunID("pxd-restart")
	p, err := m.StartProxy(ctx, port.ProxySpec{RunID: runID, Upstream: fake.URL, APIKey: fake.MasterKey(),
		Attribution: port.Attribution{BillingAccountID: "acct-restart"}, Budget: port.Budget{MaxCalls: 3}, RequireAttestation: true})
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	// The sandbox's first answer, seen whole: only then is the daemon killed (a
	// call cut by the kill would count against the budget, as it should).
	answered := &signalWriter{want: "status 200", seen: make(chan struct{})}
	go func() {
		// After the sandbox's first call: kill, restart, release the sandbox.
		select {
		case <-answered.seen:
		case <-ctx.Done():
			return
		}
		d.stop(syscall.SIGKILL)
		d.start()
		_ = os.WriteFile(filepath.Join(ws, "go"), nil, 0o644)
	}()
	sock := p.Socket()
	res, err := runner.RunOnce(ctx, port.RunSpec{RunID: runID, Image: image, LLM: &sock, WorkspaceDir: ws, Stdout: answered,
		Argv: []string{"/agent", "hold-then", port.WorkspacePath + "/go", "gpt-4o-mini", "3"}, Limits: port.Limits{Timeout: 2 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	// One call before, two after, then the budget of 3 says no.
	if res.ExitCode != 0 || strings.Count(out, "status 200") != 3 || strings.Count(out, "status 429") != 1 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.ExitCode, out, res.Stderr)
	}
	if n := fake.RequestCount("/v1/chat/completions"); n != 3 {
		t.Errorf("the upstream saw %d calls, want 3", n)
	}
	if a := p.Attestation(); a == nil || len(a.Violations()) > 0 {
		t.Errorf("attestation after the restart: %+v", a)
	}
	audit, err := p.Stop(ctx)
	if err != nil || len(audit) != 4 || audit[3].Blocked == "" {
		t.Fatalf("audit %+v %v", audit, err)
	}
}

// signalWriter closes seen once what was written contains want.
type signalWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}
