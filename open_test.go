package sandbox

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// fakeRuntimeDriver opens fakeRuntimes for the scheme "fake" in this test binary.
type fakeRuntimeDriver struct {
	mu      sync.Mutex
	cfg     port.RuntimeConfig
	target  *url.URL
	pingErr error
	last    *fakeRuntime
}

type fakeRuntime struct {
	fakeRunner
	pingErr error
	closed  int
	// workspace is what the run's workspace looked like while it ran.
	wsExisted bool
}

func (r *fakeRuntime) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	_, err := os.Stat(spec.WorkspaceDir)
	r.wsExisted = err == nil
	return r.fakeRunner.RunOnce(ctx, spec)
}
func (r *fakeRuntime) Ping(context.Context) error { return r.pingErr }
func (r *fakeRuntime) Close() error               { r.closed++; return nil }
func (r *fakeRuntime) LoadImage(_ context.Context, a io.Reader) ([]string, error) {
	b, err := io.ReadAll(a)
	return []string{"loaded:" + string(b)}, err
}

func (d *fakeRuntimeDriver) Open(_ context.Context, u *url.URL, cfg port.RuntimeConfig) (port.Runtime, error) {
	if _, err := port.TargetQuery(u); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cfg, d.target = cfg, u
	d.last = &fakeRuntime{fakeRunner: fakeRunner{res: &port.RunResult{Stdout: []byte("answer\n")}}, pingErr: d.pingErr}
	return d.last, nil
}

func (d *fakeRuntimeDriver) Detect(context.Context, *url.URL) (port.RuntimeInfo, error) {
	return port.RuntimeInfo{}, errors.New("never detected")
}

var fakeDrv = &fakeRuntimeDriver{}

func init() { port.RegisterRuntime("fake", fakeDrv) }

// anyExecutable is a file WithBridge accepts, so these tests build no bridge.
func anyExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func noLiteLLMEnv(t *testing.T) {
	t.Setenv(EnvLiteLLMURL, "")
	t.Setenv(EnvLiteLLMMasterKey, "")
}

// Open makes every part: the runtime from the target with the owner and bridge,
// the proxies' virtual key (route-restricted, one per owner, shared and deleted by
// the last Close), the reconciler; a run needs no RunID or workspace.
func TestOpenMakesTheDefaults(t *testing.T) {
	fake := litellmtest.NewServer()
	defer fake.Close()
	noLiteLLMEnv(t)
	t.Setenv(EnvLiteLLMURL, fake.URL)
	t.Setenv(EnvLiteLLMMasterKey, fake.MasterKey())
	ctx := context.Background()
	bridgeBin := anyExecutable(t)

	s1, err := Open(ctx, "fake://?runtime=runsc", WithBridge(bridgeBin))
	if err != nil {
		t.Fatal(err)
	}
	rt1 := fakeDrv.last
	if fakeDrv.cfg.Owner != DefaultOwner() || fakeDrv.cfg.Bridge != bridgeBin || fakeDrv.cfg.Runtime != "runsc" {
		t.Errorf("the runtime got %+v", fakeDrv.cfg)
	}
	keys := fake.VirtualKeys()
	if len(keys) != 1 {
		t.Fatalf("virtual keys: %v", keys)
	}
	for _, k := range keys {
		if k.Alias != keyAliasPrefix+DefaultOwner() || !slices.Equal(k.AllowedRoutes, proxypolicy.KeyRoutes()) || time.Until(k.Expires) < 23*time.Hour {
			t.Errorf("key %+v: want alias %s, the proxies' routes only, a day's life", k, keyAliasPrefix+DefaultOwner())
		}
	}
	if s1.llm == nil || s1.llm.APIKey == fake.MasterKey() || s1.reconciler == nil {
		t.Fatalf("llm %+v reconciler %v: want the virtual key, never the master key, and a reconciler", s1.llm, s1.reconciler)
	}
	// A second Sandbox of the owner shares the key.
	s2, err := Open(ctx, "fake://", WithBridge(bridgeBin))
	if err != nil {
		t.Fatal(err)
	}
	if len(fake.VirtualKeys()) != 1 || s2.llm.APIKey != s1.llm.APIKey {
		t.Errorf("a second Open minted another key: %d keys", len(fake.VirtualKeys()))
	}

	// A run without RunID or workspace: both made, the workspace gone afterwards.
	res, err := s1.Run(ctx, Request{Grant: Grant{AllowSandbox: true}, Image: "img",
		Model: "m", Attribution: port.Attribution{BillingAccountID: "acct"}, Budget: port.Budget{MaxCalls: 2}, Reconcile: true})
	if err != nil {
		t.Fatal(err)
	}
	if port.ValidateRunID(res.RunID) != nil || !strings.HasPrefix(res.RunID, "run-") || rt1.got.RunID != res.RunID {
		t.Errorf("run id %q (runner saw %q)", res.RunID, rt1.got.RunID)
	}
	if !rt1.wsExisted || rt1.got.LLM == nil || res.Text != "answer" || res.Usage == nil {
		t.Errorf("workspace existed %v, LLM %v, text %q, usage %v", rt1.wsExisted, rt1.got.LLM, res.Text, res.Usage)
	}
	if _, err := os.Stat(rt1.got.WorkspaceDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run's workspace is left: %v", err)
	}
	if names, err := s1.LoadImage(ctx, strings.NewReader("x")); err != nil || names[0] != "loaded:x" {
		t.Errorf("LoadImage = %v, %v", names, err)
	}

	if err := s1.Close(); err != nil || rt1.closed != 1 {
		t.Fatalf("Close: %v, runtime closed %d times", err, rt1.closed)
	}
	if len(fake.VirtualKeys()) != 1 {
		t.Error("the first Close deleted the key the second Sandbox uses")
	}
	if err := s2.Close(); err != nil || len(fake.VirtualKeys()) != 0 {
		t.Errorf("the last Close: %v, keys left %d", err, len(fake.VirtualKeys()))
	}
	if err := s1.Close(); err != nil || rt1.closed != 1 {
		t.Errorf("a second Close: %v, runtime closed %d times", err, rt1.closed)
	}
}

// A key that would expire before a run could end is renewed; the old one is
// deleted with the last Close, not before (a proxy may still hold it).
func TestOpenRenewsTheKey(t *testing.T) {
	fake := litellmtest.NewServer()
	defer fake.Close()
	noLiteLLMEnv(t)
	s, err := Open(context.Background(), "fake://", WithBridge(anyExecutable(t)), WithLiteLLM(fake.URL, fake.MasterKey()), WithOwner("renewal"))
	if err != nil {
		t.Fatal(err)
	}
	first := s.llm.APIKey
	k, err := s.open.key.forRun(context.Background(), 30*time.Hour)
	if err != nil || k == first || len(fake.VirtualKeys()) != 2 {
		t.Fatalf("renewal: %v, same key %v, %d keys", err, k == first, len(fake.VirtualKeys()))
	}
	if again, _ := s.open.key.forRun(context.Background(), time.Hour); again != k {
		t.Error("a fresh key was renewed again")
	}
	if err := s.Close(); err != nil || len(fake.VirtualKeys()) != 0 {
		t.Errorf("Close: %v, keys left %d", err, len(fake.VirtualKeys()))
	}
}

// Without LiteLLM, Open refuses, naming what to set, unless WithoutLLM says the
// runs need none; such a Sandbox refuses a run that asks for LLM access.
func TestOpenRefusesToRunWithoutLLMQuietly(t *testing.T) {
	noLiteLLMEnv(t)
	ctx := context.Background()
	bridgeBin := anyExecutable(t)
	_, err := Open(ctx, "fake://", WithBridge(bridgeBin))
	if !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "LITELLM_URL and LITELLM_MASTER_KEY") || !strings.Contains(err.Error(), "WithoutLLM") {
		t.Errorf("no LiteLLM: %v", err)
	}
	if rt := fakeDrv.last; rt.closed != 1 {
		t.Errorf("the refused Open left its runtime open (%d closes)", rt.closed)
	}
	t.Setenv(EnvLiteLLMURL, "http://127.0.0.1:1")
	if _, err := Open(ctx, "fake://", WithBridge(bridgeBin)); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "LITELLM_MASTER_KEY is not") {
		t.Errorf("no master key: %v", err)
	}
	t.Setenv(EnvLiteLLMMasterKey, "sk-master")
	if _, err := Open(ctx, "fake://", WithBridge(bridgeBin)); !errors.Is(err, port.ErrUnavailable) || !strings.Contains(err.Error(), "is LiteLLM running at LITELLM_URL") {
		t.Errorf("LiteLLM down: %v", err)
	}
	noLiteLLMEnv(t)
	s, err := Open(ctx, "fake://", WithBridge(bridgeBin), WithoutLLM())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Run(ctx, Request{Grant: Grant{AllowSandbox: true}, Image: "img", Model: "m"})
	if !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "Request.Model asks for LLM access") || !strings.Contains(err.Error(), "opened WithoutLLM") {
		t.Errorf("Model WithoutLLM: %v", err)
	}
	if res, err := s.Run(ctx, Request{Grant: Grant{AllowSandbox: true}, Image: "img"}); err != nil || res.Text != "answer" {
		t.Errorf("a run without LLM access: %v", err)
	}
}

func TestOpenRuntimeNotAnswering(t *testing.T) {
	fakeDrv.pingErr = errors.New("connection refused")
	defer func() { fakeDrv.pingErr = nil }()
	_, err := Open(context.Background(), "fake://", WithBridge(anyExecutable(t)), WithoutLLM())
	if err == nil || !strings.Contains(err.Error(), "sandboxctl doctor") || fakeDrv.last.closed != 1 {
		t.Errorf("err %v, closed %d", err, fakeDrv.last.closed)
	}
	if _, err := Open(context.Background(), "nosuch://", WithoutLLM(), WithBridge(anyExecutable(t))); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "adapters/nosuch") {
		t.Errorf("unknown scheme: %v", err)
	}
}

// Open's options are refused by New (their part is the host's there), and
// contradictory ones by Open.
func TestOpenOnlyOptions(t *testing.T) {
	for name, o := range map[string]Option{
		"WithOwner": WithOwner("o"), "WithBridge": WithBridge(anyExecutable(t)),
		"WithLiteLLM": WithLiteLLM("http://x", "k"), "WithoutLLM": WithoutLLM(),
	} {
		if _, err := New(&fakeRunner{}, o); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "sandbox."+name+" is an option of Open") {
			t.Errorf("New(%s): %v", name, err)
		}
	}
	llm := WithLLM(LLM{Proxy: &fakeProxy{}, Upstream: "http://127.0.0.1:4000", APIKey: "k"})
	for name, opts := range map[string][]Option{
		"WithoutLLM with WithLLM":      {WithoutLLM(), llm},
		"WithoutLLM with WithLiteLLM":  {WithoutLLM(), WithLiteLLM("http://x", "k")},
		"WithLLM with WithLiteLLM":     {llm, WithLiteLLM("http://x", "k")},
		"WithReconciler without LLM":   {WithoutLLM(), WithReconciler(&fakeReconciler{})},
		"WithBridge not an executable": {WithBridge("/etc/hostname")},
		"WithOwner not an owner":       {WithOwner("a b")},
	} {
		if _, err := Open(context.Background(), "fake://", opts...); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDefaultOwnerAndRunID(t *testing.T) {
	if o := DefaultOwner(); validateOwner(o) != nil || o != "sandbox.test" {
		t.Errorf("DefaultOwner() = %q, want this test binary's name", o)
	}
	a, b := NewRunID(), NewRunID()
	if a == b || port.ValidateRunID(a) != nil || len(a) != len("run-20261128T203600-1a2b3c4d") {
		t.Errorf("NewRunID: %q %q", a, b)
	}
	// A Sandbox made by New generates nothing: the error says how to get an ID.
	s, _ := New(&fakeRunner{})
	if _, err := s.Run(context.Background(), Request{Grant: Grant{AllowSandbox: true}, Image: "i", WorkspaceDir: t.TempDir()}); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "sandbox.NewRunID()") {
		t.Errorf("New without RunID: %v", err)
	}
}
