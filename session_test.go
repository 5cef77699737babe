package sandbox

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// fakeSessionRunner starts fake sessions, or fails to.
type fakeSessionRunner struct {
	fakeRunner
	spec     port.SessionSpec
	startErr error
}

func (f *fakeSessionRunner) Start(_ context.Context, spec port.SessionSpec) (port.Session, error) {
	f.spec = spec
	if f.startErr != nil {
		return nil, f.startErr
	}
	return &fakeSession{runID: spec.RunID}, nil
}
func (f *fakeSessionRunner) Attach(context.Context, string) (port.Session, error) {
	return nil, port.ErrNotFound
}

type fakeSession struct {
	port.Session // methods the tests do not call panic
	runID        string
	stops        int
}

func (s *fakeSession) ID() string    { return "sess-" + s.runID }
func (s *fakeSession) RunID() string { return s.runID }
func (s *fakeSession) Stop(context.Context, time.Duration) (*port.RunResult, error) {
	s.stops++
	return &port.RunResult{ExitCode: 143, Stdout: []byte(" done \n")}, nil
}

func TestStartSessionWithFakes(t *testing.T) {
	r := &fakeSessionRunner{}
	p := &fakeProxy{audit: []port.AuditRecord{{RunID: "run-1", Status: 200}, {RunID: "run-1", Status: 429, Blocked: "budget_exceeded: max_calls"}}}
	rec := &fakeReconciler{}
	sb := llmSandbox(t, r, p, WithReconciler(rec))
	req := llmRequest(t)
	req.Reconcile, req.FailOnBudget, req.Budget = true, true, port.Budget{MaxCalls: 1}
	sess, err := sb.Start(context.Background(), SessionRequest{Request: req, Expose: []int{8000}})
	if err != nil {
		t.Fatal(err)
	}
	if p.started != 1 || p.stopped != 0 {
		t.Fatalf("proxy started %d, stopped %d", p.started, p.stopped)
	}
	if r.spec.LLM == nil || r.spec.Env[DefaultModelEnv] != "m1" || len(r.spec.Expose) != 1 {
		t.Fatalf("session spec %+v", r.spec)
	}
	res, err := sess.Stop(context.Background(), 0)
	if !errors.Is(err, port.ErrBudgetExceeded) {
		t.Fatalf("Stop: %v, want the budget error (FailOnBudget)", err)
	}
	if res == nil || len(res.Audit) != 2 || !res.Policy.BudgetExceeded || res.Text != "done" || res.Usage == nil || rec.req.RunID != "run-1" || len(rec.req.Calls) != 2 {
		t.Fatalf("result %+v, reconcile request %+v", res, rec.req)
	}
	if p.stopped != 1 {
		t.Fatalf("proxy stopped %d times", p.stopped)
	}
	res2, err2 := sess.Stop(context.Background(), 0)
	if res2 != res || !errors.Is(err2, port.ErrBudgetExceeded) || p.stopped != 1 {
		t.Fatal("second Stop did not return the same result")
	}
}

func TestStartSessionRefusals(t *testing.T) {
	p := &fakeProxy{}
	sb := llmSandbox(t, &fakeSessionRunner{}, p)
	req := llmRequest(t)
	req.Grant.AllowSandbox = false
	if _, err := sb.Start(context.Background(), SessionRequest{Request: req}); !errors.Is(err, ErrNotPermitted) {
		t.Errorf("no grant: %v", err)
	}
	req = llmRequest(t)
	req.Stdout = &bytes.Buffer{}
	if _, err := sb.Start(context.Background(), SessionRequest{Request: req}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("stdout: %v", err)
	}
	if _, err := sb.Start(context.Background(), SessionRequest{Request: llmRequest(t), Expose: []int{0}}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("bad port: %v", err)
	}
	// A runner without sessions.
	plain := llmSandbox(t, &fakeRunner{}, p)
	if _, err := plain.Start(context.Background(), SessionRequest{Request: llmRequest(t)}); !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("runner without sessions: %v", err)
	}
	if p.started != 0 {
		t.Errorf("a refused session started %d proxies", p.started)
	}
}

func TestStartSessionStopsProxyOnFailure(t *testing.T) {
	p := &fakeProxy{}
	sb := llmSandbox(t, &fakeSessionRunner{startErr: port.ErrContainerFailed}, p)
	if _, err := sb.Start(context.Background(), SessionRequest{Request: request(t)}); !errors.Is(err, port.ErrContainerFailed) {
		t.Fatalf("got %v", err)
	}
	if p.started != 1 || p.stopped != 1 {
		t.Fatalf("proxy started %d, stopped %d", p.started, p.stopped)
	}
}
