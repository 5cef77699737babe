package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

func llmSandbox(t *testing.T, r port.SandboxRunner, p *fakeProxy, opts ...Option) *Sandbox {
	t.Helper()
	s, err := New(r, append([]Option{WithLLM(LLM{Proxy: p, Upstream: "http://127.0.0.1:4000", APIKey: "k"})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRunSpecFieldsPassThrough(t *testing.T) {
	r := &fakeRunner{res: &port.RunResult{}}
	s := llmSandbox(t, r, &fakeProxy{})
	req := llmRequest(t)
	var out, errw bytes.Buffer
	req.User, req.Network, req.OutputLimit = "1001:1001", port.NetworkMode{Internal: "agents"}, 4096
	req.Labels, req.OwnBridge = map[string]string{"team": "ml"}, true
	req.Stdout, req.Stderr = &out, &errw
	req.Env = map[string]string{DefaultModelEnv: "caller", "KEEP": "1"}
	if _, err := s.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	g := r.got
	if g.User != "1001:1001" || g.Network.Internal != "agents" || g.OutputLimit != 4096 || g.Labels["team"] != "ml" ||
		!g.OwnBridge || g.Stdout != &out || g.Stderr != &errw {
		t.Errorf("runner spec = %+v", g)
	}
	// The library's own variable (the model) wins over the caller's.
	if g.Env[DefaultModelEnv] != "m1" || g.Env["KEEP"] != "1" {
		t.Errorf("env = %v", g.Env)
	}
	req.Labels = map[string]string{port.LabelPrefix + "owner": "x"}
	if _, err := s.Run(context.Background(), req); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("reserved label: err = %v", err)
	}
}

func TestPolicyInResult(t *testing.T) {
	audit := []port.AuditRecord{
		{CallID: "c1", Status: 200, Model: "m1"},
		{Status: 429, Model: "m1", Method: "POST", Path: "/v1/chat/completions", Blocked: "budget_exceeded: max_calls"},
		{Status: 403, Path: "/v1/files", Blocked: "route_not_allowed"},
	}
	r := &fakeRunner{res: &port.RunResult{ExitCode: 3}}
	s := llmSandbox(t, r, &fakeProxy{audit: audit})
	req := llmRequest(t)
	res, err := s.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("without FailOnBudget a refused call is no error: %v", err)
	}
	if !res.Policy.BudgetExceeded || len(res.Policy.Blocked) != 2 || res.Policy.Blocked[0].Model != "m1" || res.Policy.Blocked[1].Blocked != "route_not_allowed" {
		t.Errorf("policy = %+v", res.Policy)
	}
	req.FailOnBudget, req.Budget = true, port.Budget{MaxCalls: 1}
	res, err = s.Run(context.Background(), req)
	if !errors.Is(err, port.ErrBudgetExceeded) || res == nil || res.Run.ExitCode != 3 {
		t.Fatalf("err = %v, res = %+v", err, res)
	}
	if !strings.Contains(err.Error(), `model "m1"`) || !strings.Contains(err.Error(), "max_calls") {
		t.Errorf("error does not name the model and rule: %v", err)
	}
	// No budget refusal: no error, even with FailOnBudget.
	s = llmSandbox(t, r, &fakeProxy{audit: audit[2:]})
	if res, err := s.Run(context.Background(), req); err != nil || res.Policy.BudgetExceeded || len(res.Policy.Blocked) != 1 {
		t.Errorf("route refusal only: err=%v policy=%+v", err, res.Policy)
	}
}

// A failed, timed-out or cancelled run is reconciled too, with a live context.
func TestReconciledOnEveryPath(t *testing.T) {
	audit := []port.AuditRecord{{CallID: "c1", Status: 200}}
	for name, r := range map[string]*fakeRunner{
		"timeout":   {res: &port.RunResult{ExitCode: -1, ErrorCode: port.CodeTimeout}, err: &port.RunError{Code: port.CodeTimeout}},
		"cancelled": {res: &port.RunResult{ExitCode: -1, ErrorCode: port.CodeTimeout}, err: &port.RunError{Code: port.CodeTimeout, Err: context.Canceled}},
		"failed":    {res: &port.RunResult{ExitCode: 1}},
	} {
		rec := &fakeReconciler{}
		s := llmSandbox(t, r, &fakeProxy{audit: audit}, WithReconciler(rec))
		ctx, cancel := context.WithCancel(context.Background())
		if name == "cancelled" {
			cancel() // the caller gave up: the calls made so far are still billed
		}
		req := llmRequest(t)
		req.Reconcile = true
		res, err := s.Run(ctx, req)
		cancel()
		if res == nil || res.Usage == nil || res.Usage.Total.TotalTokens != 42 || len(rec.req.Calls) != 1 || !rec.ctxOK {
			t.Errorf("%s: res=%+v err=%v, reconciled with live ctx %v", name, res, err, rec.ctxOK)
		}
		if name != "failed" && !errors.Is(err, port.ErrTimeout) {
			t.Errorf("%s: err = %v, want the run's error kept", name, err)
		}
	}
}

func TestReconcileAsync(t *testing.T) {
	rec := &fakeReconciler{gate: make(chan struct{})}
	s := llmSandbox(t, &fakeRunner{res: &port.RunResult{}}, &fakeProxy{audit: []port.AuditRecord{{CallID: "c1"}}}, WithReconciler(rec))
	req := llmRequest(t)
	req.ReconcileAsync = true
	res, err := s.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage != nil || res.Reconciling == nil {
		t.Fatalf("usage %v, reconciling %v: Run must not wait", res.Usage, res.Reconciling)
	}
	select {
	case <-res.Reconciling.Done():
		t.Fatal("done before the reconciler answered")
	default:
	}
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	if _, err := res.Reconciling.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with a short ctx: %v", err)
	}
	cancel()
	close(rec.gate)
	u, err := res.Reconciling.Wait(context.Background())
	if err != nil || u == nil || u.Total.TotalTokens != 42 {
		t.Errorf("usage %+v, err %v", u, err)
	}
}

func TestReconcileTimeoutBounds(t *testing.T) {
	rec := &fakeReconciler{gate: make(chan struct{})} // never answers
	s := llmSandbox(t, &fakeRunner{res: &port.RunResult{}}, &fakeProxy{audit: []port.AuditRecord{{CallID: "c1"}}},
		WithReconciler(rec), WithReconcileTimeout(50*time.Millisecond))
	req := llmRequest(t)
	req.Reconcile = true
	start := time.Now()
	res, err := s.Run(context.Background(), req)
	if !errors.Is(err, context.DeadlineExceeded) || res == nil || time.Since(start) > 5*time.Second {
		t.Errorf("err = %v after %v", err, time.Since(start))
	}
	for _, d := range []time.Duration{0, -1, 25 * time.Hour} {
		if _, err := New(&fakeRunner{}, WithReconcileTimeout(d)); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("timeout %v accepted", d)
		}
	}
}

func TestWorkspaceCheck(t *testing.T) {
	s, _ := New(&fakeRunner{res: &port.RunResult{}})
	for _, mode := range []os.FileMode{0o700, 0o755, 0o750} {
		dir := t.TempDir()
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		req := request(t)
		req.WorkspaceDir = dir
		_, err := s.Run(context.Background(), req)
		var we *WorkspaceError
		if os.Getuid() == 1001 {
			t.Skip("the test runs as the sandbox user")
		}
		if !errors.As(err, &we) || !errors.Is(err, port.ErrInvalidSpec) || we.UID != 1001 || we.Mode != mode {
			t.Fatalf("mode %o: err = %v", mode, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "uid 1001") || !strings.Contains(msg, fmt.Sprintf("mode %04o", uint32(mode))) {
			t.Errorf("message does not name uid and mode: %s", msg)
		}
	}
	// The run's user decides: a workspace of uid 2000 suits User "2000:2000".
	if os.Getuid() == 0 {
		dir := t.TempDir()
		if err := os.Chown(dir, 2000, 2000); err != nil {
			t.Fatal(err)
		}
		req := request(t)
		req.WorkspaceDir, req.User = dir, "2000:2000"
		if _, err := s.Run(context.Background(), req); err != nil {
			t.Errorf("uid 2000's own workspace refused: %v", err)
		}
		req.User = ""
		if _, err := s.Run(context.Background(), req); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("uid 2000's 0700 workspace accepted for uid 1001: %v", err)
		}
	}
	// Off on request.
	s, _ = New(&fakeRunner{res: &port.RunResult{}}, WithoutWorkspaceCheck())
	req := request(t)
	req.WorkspaceDir = t.TempDir()
	if _, err := s.Run(context.Background(), req); err != nil {
		t.Errorf("WithoutWorkspaceCheck: %v", err)
	}
}

func TestNewWorkspace(t *testing.T) {
	parent := t.TempDir()
	w, err := NewWorkspace(parent, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckWorkspace(w.Dir(), port.DefaultUser); err != nil {
		t.Errorf("a new workspace fails the check: %v", err)
	}
	fi, err := os.Stat(filepath.Dir(w.Dir()))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the private parent: %v %v", fi.Mode(), err)
	}
	if os.Getuid() == 0 {
		if uid, gid, _ := owner(mustStat(t, w.Dir())); uid != 1001 || gid != 1001 || mustStat(t, w.Dir()).Mode().Perm() != 0o700 {
			t.Errorf("workspace owner %d:%d mode %v, want 1001:1001 0700", uid, gid, mustStat(t, w.Dir()).Mode())
		}
	}
	// Hostile content: a link out, a directory nobody may enter, a deep tree.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, os.Symlink(outside, filepath.Join(w.Dir(), "out")))
	must(t, os.MkdirAll(filepath.Join(w.Dir(), "locked", "inner"), 0o755))
	must(t, os.WriteFile(filepath.Join(w.Dir(), "locked", "inner", "f"), []byte("x"), 0o000))
	must(t, os.Chmod(filepath.Join(w.Dir(), "locked", "inner"), 0o000))
	must(t, os.Chmod(filepath.Join(w.Dir(), "locked"), 0o000))
	if err := w.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(w.Dir())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("Remove followed the link out: %v", err)
	}
	if err := w.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	for _, bad := range []string{"0", "root", "0:0", "x:1", "1001:-1"} {
		if _, err := NewWorkspace(parent, bad); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("user %q: err = %v", bad, err)
		}
	}
}

func mustStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPolicyUpstreamAndAttestation: calls the upstream did not answer and calls
// refused for a missing attestation are named in Result.Policy; FailOnUpstream
// and RequireAttestation make them errors.
func TestPolicyUpstreamAndAttestation(t *testing.T) {
	audit := []port.AuditRecord{
		{CallID: "c1", Status: 200, Model: "m1"},
		{Status: 502, Method: "POST", Path: "/v1/chat/completions", Error: "upstream: dial tcp 127.0.0.1:1: connection refused"},
		{Status: 200, Method: "POST", Path: "/v1/chat/completions", Error: "upstream response cut: unexpected EOF"},
		{Status: 499, Method: "POST", Path: "/v1/chat/completions", Error: "client went away: broken pipe"},
	}
	r := &fakeRunner{res: &port.RunResult{}}
	req := llmRequest(t)
	res, err := llmSandbox(t, r, &fakeProxy{audit: audit}).Run(context.Background(), req)
	if err != nil {
		t.Fatalf("without FailOnUpstream upstream failures are no error: %v", err)
	}
	if len(res.Policy.UpstreamFailures) != 2 || res.Policy.UpstreamFailures[0].Status != 502 || res.Policy.AttestationRefused {
		t.Errorf("policy = %+v", res.Policy)
	}
	req.FailOnUpstream = true
	res, err = llmSandbox(t, r, &fakeProxy{audit: audit}).Run(context.Background(), req)
	if !errors.Is(err, port.ErrUnavailable) || res == nil || !strings.Contains(err.Error(), "2 LLM call(s)") {
		t.Errorf("FailOnUpstream: err = %v", err)
	}
	refused := []port.AuditRecord{{Status: 403, Method: "POST", Path: "/v1/chat/completions", Blocked: "attestation_missing"}}
	req = llmRequest(t)
	req.RequireAttestation = true
	res, err = llmSandbox(t, r, &fakeProxy{audit: refused}).Run(context.Background(), req)
	if !errors.Is(err, ErrNotPermitted) || res == nil || !res.Policy.AttestationRefused {
		t.Errorf("attestation refused: err = %v, policy %+v", err, res)
	}
}
