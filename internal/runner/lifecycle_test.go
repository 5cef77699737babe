package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// script is Steps that record the order they ran in and end where told.
type script struct {
	log      []string
	failAt   string // the step that returns err
	err      error
	waitSlow bool // Wait waits for runCtx
	code     port.ErrorCode
	panicAt  string
}

func (s *script) step(name string, run *Run) error {
	s.log = append(s.log, name)
	if run != nil {
		run.Defer(func() { s.log = append(s.log, "undo "+name) })
	}
	if s.panicAt == name {
		panic("boom")
	}
	if s.failAt == name {
		return s.err
	}
	return nil
}

func (s *script) Validate(_ context.Context, spec port.RunSpec) (port.RunSpec, error) {
	spec.Limits.Timeout = 50 * time.Millisecond
	return spec, s.step("validate", nil)
}
func (s *script) Image(_ context.Context, run *Run) error  { return s.step("image", run) }
func (s *script) Create(_ context.Context, run *Run) error { return s.step("create", run) }
func (s *script) Attach(_ context.Context, run *Run) error { return s.step("attach", run) }
func (s *script) Start(_ context.Context, run *Run) error  { return s.step("start", run) }
func (s *script) Wait(_, runCtx context.Context, run *Run) error {
	if err := s.step("wait", run); err != nil {
		return err
	}
	if s.waitSlow {
		<-runCtx.Done()
		return runCtx.Err()
	}
	run.Result.ExitCode = 3
	return nil
}
func (s *script) Stop(ctx context.Context, run *Run) error {
	s.log = append(s.log, "stop")
	return Fail(port.CodeTimeout, DeadlineCause(ctx, run.Spec.Limits.Timeout))
}
func (s *script) Classify(context.Context, *Run) (port.ErrorCode, error) {
	s.log = append(s.log, "classify")
	if s.code != "" {
		return s.code, errors.New("classified")
	}
	return "", nil
}

// TestLifecycleOrder: the steps run in the lifecycle's order, and the clean-ups in
// the reverse one, after the result is in.
func TestLifecycleOrder(t *testing.T) {
	s := &script{}
	res, err := Lifecycle(context.Background(), "x.RunOnce", port.RunSpec{RunID: "r1"}, s)
	if err != nil || res == nil || res.ExitCode != 3 || res.ErrorCode != "" {
		t.Fatalf("res %+v, err %v", res, err)
	}
	want := "validate image create attach start wait classify undo wait undo start undo attach undo create undo image"
	if got := strings.Join(s.log, " "); got != want {
		t.Errorf("order:\n got %s\nwant %s", got, want)
	}
}

// TestLifecycleEndings: a plain error refuses the run (no result), a *Failure fails
// it with its code, a wait the limit ended is stopped as a timeout, and a
// classification fails it; each error names the operation and the run.
func TestLifecycleEndings(t *testing.T) {
	bad := errors.New("bad")
	for _, tc := range []struct {
		name     string
		s        *script
		result   bool
		code     port.ErrorCode
		contains string
	}{
		{"refused spec", &script{failAt: "validate", err: port.Invalidf("no")}, false, "", "invalid spec"},
		{"refused create", &script{failAt: "create", err: bad}, false, "", "bad"},
		{"failed start", &script{failAt: "start", err: Fail(port.CodeContainerFailed, bad)}, true, port.CodeContainerFailed, "bad"},
		{"failed wait", &script{failAt: "wait", err: Fail(port.CodeInternal, bad)}, true, port.CodeInternal, "bad"},
		{"timeout", &script{waitSlow: true}, true, port.CodeTimeout, "run exceeded its 50ms limit"},
		{"classified", &script{code: port.CodeOOMKilled}, true, port.CodeOOMKilled, "classified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Lifecycle(context.Background(), "x.RunOnce", port.RunSpec{RunID: "r1"}, tc.s)
			var op *port.OpError
			if !errors.As(err, &op) || op.Op != "x.RunOnce" || op.RunID != "r1" || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("err = %v", err)
			}
			if (res != nil) != tc.result {
				t.Fatalf("result %+v, want one: %v", res, tc.result)
			}
			var re *port.RunError
			if tc.result && (res.ErrorCode != tc.code || !errors.As(err, &re) || re.Code != tc.code || res.Duration <= 0) {
				t.Errorf("result %+v, err %v, want code %s", res, err, tc.code)
			}
			if !tc.result && errors.As(err, &re) {
				t.Errorf("a refusal carries a run error: %v", err)
			}
		})
	}
}

// TestLifecycleCleansUpOnPanic: a step that panics still has every clean-up run.
func TestLifecycleCleansUpOnPanic(t *testing.T) {
	s := &script{panicAt: "start"}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic was swallowed")
			}
		}()
		_, _ = Lifecycle(context.Background(), "x.RunOnce", port.RunSpec{RunID: "r1"}, s)
	}()
	if got, want := strings.Join(s.log, " "), "validate image create attach start undo start undo attach undo create undo image"; got != want {
		t.Errorf("order:\n got %s\nwant %s", got, want)
	}
}

// TestCleanUpsSurviveAPanickingOne: the clean-ups registered before one that panics
// still run.
func TestCleanUpsSurviveAPanickingOne(t *testing.T) {
	var ran []int
	r := &Run{}
	r.Defer(func() { ran = append(ran, 1) })
	r.Defer(func() { panic("in clean-up") })
	r.Defer(func() { ran = append(ran, 3) })
	func() {
		defer func() { _ = recover() }()
		r.cleanUp()
	}()
	if len(ran) != 2 || ran[0] != 3 || ran[1] != 1 {
		t.Errorf("ran %v, want [3 1]", ran)
	}
}
