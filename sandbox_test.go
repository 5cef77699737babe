package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/port"
)

type fakeRunner struct {
	got   port.RunSpec
	res   *port.RunResult
	err   error
	panic bool
}

func (f *fakeRunner) RunOnce(_ context.Context, spec port.RunSpec) (*port.RunResult, error) {
	f.got = spec
	if f.panic {
		panic("runner blew up")
	}
	return f.res, f.err
}

type fakeProxy struct {
	started, stopped int
	spec             port.ProxySpec
	audit            []port.AuditRecord
}

func (f *fakeProxy) Start(_ context.Context, spec port.ProxySpec) (port.Proxy, error) {
	f.started++
	f.spec = spec
	return f, nil
}
func (f *fakeProxy) Socket() port.LLMSocket { return port.LLMSocket{HostDir: "/run/llm-1"} }
func (f *fakeProxy) Stop(context.Context) ([]port.AuditRecord, error) {
	f.stopped++
	return f.audit, nil
}

type fakeReconciler struct {
	req   port.ReconcileRequest
	ctxOK bool          // the context was live when Reconcile was called
	gate  chan struct{} // if set, Reconcile waits for it
}

func (f *fakeReconciler) Reconcile(ctx context.Context, req port.ReconcileRequest) (*port.Reconciliation, error) {
	f.req = req
	f.ctxOK = ctx.Err() == nil
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &port.Reconciliation{Total: port.Usage{Calls: len(req.Calls), TotalTokens: 42}}, nil
}

// workspaceDir is a workspace the default sandbox user can use.
func workspaceDir(t *testing.T) string {
	t.Helper()
	w, err := NewWorkspace(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Remove() })
	return w.Dir()
}

// request is a run without LLM access (llmRequest is one with it): a Sandbox
// without WithLLM refuses the LLM fields.
func request(t *testing.T) Request {
	return Request{
		Grant: Grant{AllowSandbox: true}, RunID: "run-1", Image: "img", Argv: []string{"/agent"},
		WorkspaceDir: workspaceDir(t), Messages: []Message{{Role: "user", Content: "hi"}},
	}
}

// llmRequest is request with a model and who pays.
func llmRequest(t *testing.T) Request {
	req := request(t)
	req.Model, req.Attribution = "m1", port.Attribution{BillingAccountID: "acct"}
	return req
}

func TestRunEndToEndWithFakes(t *testing.T) {
	r := &fakeRunner{res: &port.RunResult{Stdout: []byte(`{"payloads":[{"text":"hello"},{"text":"world"}],"meta":{}}`)}}
	p := &fakeProxy{audit: []port.AuditRecord{{RunID: "run-1", CallID: "c1", Status: 200}}}
	rec := &fakeReconciler{}
	s, err := New(r, WithLLM(LLM{Proxy: p, Upstream: "http://127.0.0.1:4000", APIKey: "sk-1"}), WithReconciler(rec))
	if err != nil {
		t.Fatal(err)
	}
	req := llmRequest(t)
	req.Reconcile = true
	app := t.TempDir()
	req.Mounts = []port.Mount{{Source: app, Target: "/opt/app"}}
	res, err := s.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"payloads":[{"text":"hello"},{"text":"world"}],"meta":{}}`; res.Text != want || string(res.Run.Stdout) != want {
		t.Errorf("text = %q, stdout %q: the facade returns the agent's output as it is", res.Text, res.Run.Stdout)
	}
	if r.got.Env[DefaultModelEnv] != "m1" || r.got.LLM == nil || r.got.LLM.HostDir != "/run/llm-1" ||
		len(r.got.Mounts) != 1 || r.got.Mounts[0] != (port.Mount{Source: app, Target: "/opt/app"}) {
		t.Errorf("runner spec = %+v", r.got)
	}
	if p.spec.APIKey != "sk-1" || p.spec.Attribution.BillingAccountID != "acct" || p.stopped != 1 {
		t.Errorf("proxy spec = %+v, stopped %d", p.spec, p.stopped)
	}
	if len(res.Audit) != 1 || res.Usage == nil || res.Usage.Total.TotalTokens != 42 || rec.req.Calls[0].CallID != "c1" {
		t.Errorf("audit %v usage %+v", res.Audit, res.Usage)
	}
	b, err := os.ReadFile(filepath.Join(req.WorkspaceDir, ".cogni", "messages.json"))
	if err != nil || string(b) != `[{"role":"user","content":"hi"}]` {
		t.Errorf("messages.json = %s, %v", b, err)
	}
}

func TestRunNeedsGrant(t *testing.T) {
	s, _ := New(&fakeRunner{})
	req := request(t)
	req.Grant.AllowSandbox = false
	if _, err := s.Run(context.Background(), req); !errors.Is(err, ErrNotPermitted) {
		t.Errorf("err = %v", err)
	}
}

func TestRunRejectsBadInputBeforeStarting(t *testing.T) {
	p := &fakeProxy{}
	s, _ := New(&fakeRunner{}, WithLLM(LLM{Proxy: p, Upstream: "http://127.0.0.1:4000", APIKey: "k"}))
	for name, mut := range map[string]func(*Request){
		"bad run id":        func(r *Request) { r.RunID = "a/b" },
		"no workspace":      func(r *Request) { r.WorkspaceDir = "" },
		"bad env":           func(r *Request) { r.Env = map[string]string{"1X": "y"} },
		"tiny memory":       func(r *Request) { r.Limits.MemoryBytes = 1024 },
		"reconcile, none":   func(r *Request) { r.Reconcile = true },
		"relative mount":    func(r *Request) { r.Mounts = []port.Mount{{Source: "app", Target: "/opt/app"}} },
		"reserved mount":    func(r *Request) { r.Mounts = []port.Mount{{Source: t.TempDir(), Target: port.WorkspacePath}} },
		"missing mount":     func(r *Request) { r.Mounts = []port.Mount{{Source: "/nonexistent-mount-src", Target: "/opt/app"}} },
		"missing workspace": func(r *Request) { r.WorkspaceDir = "/nonexistent-workspace" },
		// The image's bridge would report the attestation: the agent's own.
		"self-attestation": func(r *Request) { r.OwnBridge, r.RequireAttestation = true, true },
	} {
		req := llmRequest(t)
		mut(&req)
		if _, err := s.Run(context.Background(), req); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec", name, err)
		}
	}
	if p.started != 0 {
		t.Errorf("proxy started %d times for invalid requests", p.started)
	}
}

func TestProxyStoppedWhenRunnerPanics(t *testing.T) {
	p := &fakeProxy{}
	s, _ := New(&fakeRunner{panic: true}, WithLLM(LLM{Proxy: p, Upstream: "http://127.0.0.1:4000", APIKey: "k"}))
	func() {
		defer func() { _ = recover() }()
		_, _ = s.Run(context.Background(), llmRequest(t))
	}()
	if p.stopped != 1 {
		t.Errorf("proxy stopped %d times after a panic, want 1", p.stopped)
	}
}

func TestAuditKeptWhenRunFails(t *testing.T) {
	p := &fakeProxy{audit: []port.AuditRecord{{CallID: "c1"}}}
	r := &fakeRunner{res: &port.RunResult{ExitCode: -1, ErrorCode: port.CodeTimeout}, err: &port.RunError{Code: port.CodeTimeout}}
	s, _ := New(r, WithLLM(LLM{Proxy: p, Upstream: "http://127.0.0.1:4000", APIKey: "k"}))
	res, err := s.Run(context.Background(), llmRequest(t))
	if !errors.Is(err, port.ErrTimeout) || res == nil || len(res.Audit) != 1 {
		t.Errorf("err=%v res=%+v", err, res)
	}
}

func TestMessagesDoNotFollowSymlinks(t *testing.T) {
	ws := workspaceDir(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ws, ".cogni")); err != nil {
		t.Fatal(err)
	}
	s, _ := New(&fakeRunner{res: &port.RunResult{}})
	req := request(t)
	req.WorkspaceDir = ws
	_, err := s.Run(context.Background(), req)
	if err == nil {
		t.Error("a symlinked .cogni was followed")
	}
	if _, serr := os.Stat(filepath.Join(outside, "messages.json")); serr == nil {
		t.Error("messages written outside the workspace")
	}
}

func TestPlainStdoutTrimmed(t *testing.T) {
	s, _ := New(&fakeRunner{res: &port.RunResult{Stdout: []byte("  just text\n")}})
	res, err := s.Run(context.Background(), request(t))
	if err != nil || res.Text != "just text" {
		t.Errorf("text %q, err %v", res.Text, err)
	}
}

func TestAgentContractOptions(t *testing.T) {
	r := &fakeRunner{res: &port.RunResult{}}
	s, err := New(r, WithModelEnv("AGENT_MODEL"), WithMessagesFile("in/msgs.json"), WithLLM(LLM{Proxy: &fakeProxy{}, Upstream: "http://127.0.0.1:4000", APIKey: "k"}))
	if err != nil {
		t.Fatal(err)
	}
	req := llmRequest(t)
	if _, err := s.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if r.got.Env["AGENT_MODEL"] != "m1" || r.got.Env[DefaultModelEnv] != "" {
		t.Errorf("env = %v", r.got.Env)
	}
	if b, err := os.ReadFile(filepath.Join(req.WorkspaceDir, "in", "msgs.json")); err != nil || string(b) != `[{"role":"user","content":"hi"}]` {
		t.Errorf("messages = %s, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(req.WorkspaceDir, ".cogni")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("default messages dir made anyway: %v", err)
	}
	// A file at the top of the workspace needs no directory.
	req.Model, req.Attribution = "", port.Attribution{}
	if s, err = New(r, WithMessagesFile("msgs.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Option{
		WithModelEnv(""), WithModelEnv("1X"), WithModelEnv("A-B"),
		WithMessagesFile(""), WithMessagesFile("/abs.json"), WithMessagesFile("../out.json"),
		WithMessagesFile("a/../../b"), WithMessagesFile("a//b"), WithMessagesFile("dir/"), WithMessagesFile(`a\b`),
	} {
		if _, err := New(r, bad); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("bad option accepted: %v", err)
		}
	}
}

func TestWithLLMRejectsBadKey(t *testing.T) {
	for _, key := range []string{"", "sk 1", "sk\n1", "sk-é"} {
		if _, err := New(&fakeRunner{}, WithLLM(LLM{Proxy: &fakeProxy{}, Upstream: "http://127.0.0.1:4000", APIKey: key})); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("key %q: err = %v", key, err)
		}
	}
}

// TestKeyInProxy: with KeyInProxy the facade holds no key and registers runs without
// one (the proxy daemon injects its own); a key given as well is refused.
func TestKeyInProxy(t *testing.T) {
	if _, err := New(&fakeRunner{}, WithLLM(LLM{Proxy: &fakeProxy{}, Upstream: "http://127.0.0.1:4000", APIKey: "sk-1", KeyInProxy: true})); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a key with KeyInProxy: err = %v", err)
	}
	p := &fakeProxy{}
	s, err := New(&fakeRunner{res: &port.RunResult{}}, WithLLM(LLM{Proxy: p, Upstream: "http://127.0.0.1:4000", KeyInProxy: true}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), llmRequest(t)); err != nil {
		t.Fatal(err)
	}
	if p.started != 1 || p.spec.APIKey != "" {
		t.Errorf("proxy started %d times with key %q, want once without", p.started, p.spec.APIKey)
	}
}

func TestLogsCarryComponentAndRun(t *testing.T) {
	var buf bytes.Buffer
	s, err := New(&fakeRunner{res: &port.RunResult{}}, WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), request(t)); err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if rec[logattr.Component] != "sandbox" || rec[logattr.RunID] != "run-1" {
		t.Errorf("record %v", rec)
	}
}

// The facade runs agents on the ports only: no adapter, no proxy configuration, no
// agent's output format (internal/telemetry is the OTel API's instruments, a leaf
// like logattr; internal/statearchive saves and restores a workspace tree, a leaf on
// the standard library and port). Only Open's defaults (open.go, openkey.go) name the parts they make:
// the in-process proxy, the LiteLLM client and reconciler, the bridge's build and the
// key's routes; none of them links a runtime's client.
func TestFacadeImportsPortsOnly(t *testing.T) {
	const mod = "github.com/agentsandbox/sandbox/"
	allowed := map[string]bool{mod + "port": true, mod + "internal/logattr": true, mod + "internal/telemetry": true, mod + "internal/statearchive": true}
	defaults := map[string]bool{mod + "adapters/inprocproxy": true, mod + "adapters/litellmspend": true, mod + "litellm": true, mod + "bridge": true, mod + "proxypolicy": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, is := range f.Imports {
			imp, _ := strconv.Unquote(is.Path.Value)
			if !strings.HasPrefix(imp, mod) || allowed[imp] || (defaults[imp] && (name == "open.go" || name == "openkey.go")) {
				continue
			}
			t.Errorf("%s imports %s", name, imp)
		}
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, runtime := range []string{mod + "adapters/docker", mod + "adapters/containerd", mod + "adapters/nomad", mod + "adapters/kubernetes",
			"github.com/moby/moby/client", "github.com/containerd/containerd/v2/client", "github.com/hashicorp/nomad/api", "k8s.io/client-go/kubernetes"} {
			if dep == runtime {
				t.Errorf("the facade links %s", dep)
			}
		}
	}
}
