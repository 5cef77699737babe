package containerd

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestCancelDuringStartIsTheRunsEnd: a caller that gives up while the task's start is
// unanswered (its shim stopped as soon as the task exists) ends the run as a timeout
// wrapping its cause, promptly, not as the container's failure (what the suite's
// CancelKills asks, which a loaded machine reached during the task's create); after the
// shim resumes, a Sweep leaves nothing.
func TestCancelDuringStartIsTheRunsEnd(t *testing.T) {
	const grace, slack = time.Second, 3 * time.Second
	r, image := runnerEnv(t, WithOwner("fault-cancel"), WithKillGrace(grace))
	outer, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	ctx, cancel := context.WithCancel(outer)
	runID := sandboxtest.RunID("cancel-start")
	type outcome struct {
		res *port.RunResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: image, Argv: []string{"/agent", "sleep", "60"}, Limits: port.Limits{Timeout: time.Minute}})
		done <- outcome{res, err}
	}()
	id, _ := waitTask(outer, t, r, runID, client.Created)
	pid := shimPID(t, id)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume := func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	cancelled := time.Now()
	cancel()
	var o outcome
	select {
	case o = <-done:
	case <-outer.Done():
		t.Fatal("RunOnce did not return")
	}
	if took := time.Since(cancelled); took > grace+slack {
		t.Errorf("RunOnce returned %v after the cancel, want at most the kill grace %v (+%v slack)", took, grace, slack)
	}
	if !errors.Is(o.err, port.ErrTimeout) || !errors.Is(o.err, context.Canceled) || o.res == nil || o.res.ErrorCode != port.CodeTimeout {
		t.Fatalf("RunOnce = %+v, %v; want a timeout wrapping context.Canceled", o.res, o.err)
	}
	resume()
	if _, err := r.Sweep(outer, port.SweepOptions{RunID: runID}); err != nil {
		t.Errorf("Sweep: %v", err)
	}
	if left, err := leftovers(r)(outer, runID); err != nil || len(left) > 0 {
		t.Errorf("left behind after Sweep: %v %v", left, err)
	}
}
