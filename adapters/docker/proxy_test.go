package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

var nginxImage struct {
	once sync.Once
	ref  string
	err  error
}

// proxyEnv returns a ProxyManager on the locally built nginx image (with extra
// options) and a Runner with the bridge, both owned by owner, and the per-run base
// directory.
func proxyEnv(t testing.TB, owner string, extra ...ProxyOption) (*ProxyManager, *Runner, string, string) {
	t.Helper()
	owner = testenv.Owner(owner)
	cli, agent := dockerEnv(t)
	testenv.NeedCommand(t, "nginx", "nginx")
	ctx := context.Background()
	nginxImage.once.Do(func() {
		ref, archive, err := testimages.NginxArchive(ctx)
		if err == nil {
			err = testimages.EnsureDocker(ctx, cli, ref, archive)
		}
		nginxImage.ref, nginxImage.err = ref, err
	})
	if nginxImage.err != nil {
		t.Fatalf("nginx image: %v", nginxImage.err)
	}
	base, err := os.MkdirTemp("", "proxytest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	m, err := NewProxyManager(append([]ProxyOption{WithClient(cli), WithOwner(owner), WithProxyImage(nginxImage.ref), WithProxyBaseDir(base), WithUnfilteredBodies()}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := bridge.Build(ctx, filepath.Join(os.TempDir(), "agentsandbox-bridge-test"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(WithClient(cli), WithOwner(owner), WithBridge(bin))
	if err != nil {
		t.Fatal(err)
	}
	return m, r, agent, base
}

func TestProxyManagerConformance(t *testing.T) {
	m, r, agent, base := proxyEnv(t, "porttest")
	cli, _ := dockerEnv(t)
	// The sandboxes share the run id; their removal runs after each result, so drain it.
	labelled := drained(r, leftovers(cli))
	sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{
		Manager: m, Runner: r, Image: agent,
		Kill: func(ctx context.Context, p port.Proxy) error {
			_, err := cli.ContainerKill(ctx, p.(*nginxProxy).id, client.ContainerKillOptions{Signal: "SIGKILL"})
			return err
		},
		Leftovers: func(ctx context.Context, runID string) ([]string, error) {
			out, err := labelled(ctx, runID)
			entries, _ := os.ReadDir(filepath.Join(base, testenv.Owner("porttest")))
			for _, e := range entries {
				// The directory's name may carry a shortened run id (socket paths are
				// short): its owner record names the run.
				b, _ := os.ReadFile(filepath.Join(base, testenv.Owner("porttest"), e.Name(), proxyMetaFile))
				if strings.HasPrefix(e.Name(), runID+"-") || strings.Contains(string(b), `"run_id":"`+runID+`"`) {
					out = append(out, "dir:"+e.Name())
				}
			}
			return out, err
		},
	})
}

// The configuration holding the key is in a directory of the proxy user only, and
// is gone (overwritten, then deleted) once Start has returned: nginx, which answered
// /health, has read it.
func TestProxyConfigPrivateAndDeleted(t *testing.T) {
	m, _, _, _ := proxyEnv(t, "conf")
	p, err := m.Start(context.Background(), port.ProxySpec{
		RunID: sandboxtest.RunID("conf"), Upstream: "http://127.0.0.1:9", APIKey: "sk-private-1",
		Attribution: port.Attribution{BillingAccountID: "acct"},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(p.Socket().HostDir)
	conf := filepath.Join(dir, "conf", "nginx.conf")
	if _, err := os.Stat(conf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the config with the key is still on disk after Start (%v)", err)
	}
	if cd, _ := os.Stat(filepath.Dir(conf)); cd.Mode().Perm() != 0o700 {
		t.Errorf("config dir mode %v, want 0700", cd.Mode().Perm())
	}
	if _, err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run dir survives Stop: %v", err)
	}
}

// A proxy that cannot start reports its last log lines and leaves nothing behind.
func TestProxyStartFailureReportsLogs(t *testing.T) {
	m, _, _, base := proxyEnv(t, "broken")
	m.cfg.proxy.image = env.image // the probe agent: "nginx" is not in it
	m.cfg.proxy.readyTimeout = 5 * time.Second
	runID := sandboxtest.RunID("broken")
	_, err := m.Start(context.Background(), port.ProxySpec{
		RunID: runID, Upstream: "http://127.0.0.1:9", APIKey: "k", Attribution: port.Attribution{BillingAccountID: "a"},
	})
	if !errors.Is(err, port.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	cli, _ := dockerEnv(t)
	if left, _ := leftovers(cli)(context.Background(), runID); len(left) > 0 {
		t.Errorf("failed start left %v", left)
	}
	if entries, _ := os.ReadDir(filepath.Join(base, testenv.Owner("broken"))); len(entries) > 0 {
		t.Errorf("failed start left directories: %v", entries)
	}
}

// The audit is a pipe, not a file: a proxy flooded with refused requests leaves nothing
// on disk, the manager keeps a bounded number of records and counts the rest, and
// forwarded calls over the limit make Stop fail rather than vanish.
func TestProxyAuditPipeBounded(t *testing.T) {
	var logs lockedLog
	m, _, _, _ := proxyEnv(t, "flood", WithMaxAuditRecords(3), WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	fake := litellmtest.NewServer()
	t.Cleanup(fake.Close)
	ctx := context.Background()
	runID := sandboxtest.RunID("flood")
	p, err := m.Start(ctx, port.ProxySpec{RunID: runID, Upstream: fake.URL, APIKey: fake.MasterKey(), Attribution: port.Attribution{BillingAccountID: "acct"}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_, _ = p.Stop(ctx)
		}
	})
	hc := unixKeepAlive(filepath.Join(p.Socket().HostDir, port.LLMSocketName))
	const workers, each, calls = 4, 1000, 5
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				resp, err := hc.Get("http://proxy/key/generate")
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	for i := 0; i < calls; i++ {
		resp, err := hc.Post("http://proxy/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d", i, resp.StatusCode)
		}
	}
	logDir := filepath.Join(filepath.Dir(p.Socket().HostDir), "log")
	entries, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if fi, err := e.Info(); err != nil || fi.Mode().Type() != os.ModeNamedPipe {
			t.Errorf("log dir holds %s (%v): the audit must not reach the disk", e.Name(), fi.Mode())
		}
	}

	audit, err := p.Stop(ctx)
	stopped = true
	if !errors.Is(err, ErrAuditTruncated) || !strings.Contains(err.Error(), "2 forwarded calls over the limit of 3") {
		t.Errorf("Stop: %v, want ErrAuditTruncated for 2 calls", err)
	}
	var forwarded, refused int
	for _, r := range audit {
		switch {
		case r.Blocked == "path_not_allowed":
			refused++
		case r.Blocked == "" && r.Status == http.StatusOK && r.CallID != "":
			forwarded++
		default:
			t.Errorf("unexpected record %+v", r)
		}
		if r.RunID != runID {
			t.Errorf("record of run %q", r.RunID)
		}
	}
	if forwarded != 3 || refused == 0 || refused > 99*9 {
		t.Errorf("kept %d forwarded and %d refused records, want 3 and a bounded sample", forwarded, refused)
	}
	if !strings.Contains(logs.String(), fmt.Sprintf(`"refused":%d`, workers*each)) {
		t.Errorf("the refused requests were not counted in the log:\n%s", logs.String())
	}
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestProxyRefusesUnfilteredBodiesUnlessAcknowledged: nginx cannot apply the body
// allowlist, so it does not start without the caller's acknowledgement, before any
// container or file exists.
func TestProxyRefusesUnfilteredBodiesUnlessAcknowledged(t *testing.T) {
	base := t.TempDir()
	m, err := NewProxyManager(WithOwner(testenv.Owner("bodies")), WithProxyBaseDir(base))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = m.Start(context.Background(), port.ProxySpec{
		RunID: "bodies-1", Upstream: "http://127.0.0.1:1", APIKey: "sk-test-key",
		Attribution: port.Attribution{BillingAccountID: "acct"},
	})
	if !errors.Is(err, port.ErrUnsupported) || !strings.Contains(err.Error(), "WithUnfilteredBodies") {
		t.Fatalf("Start = %v, want ErrUnsupported naming WithUnfilteredBodies", err)
	}
	if ents, _ := os.ReadDir(base); len(ents) != 0 {
		t.Errorf("a refused start left %d entries in the base directory", len(ents))
	}
}
