package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestFrozenShimReturnsAtDeadline stops (SIGSTOP) the shim of the test's own run
// across the run's time limit: RunOnce must return timeout by the limit plus the kill
// grace while the shim is still stopped, and once it resumes the background removal
// and a Sweep leave nothing of the run. About 6 s.
func TestFrozenShimReturnsAtDeadline(t *testing.T) { testFrozenShim(t, client.Running) }

// TestFrozenShimAtStartReturnsAtDeadline stops the shim as soon as the run's task
// exists, so that the start is in flight or not yet answered: the start is bounded by
// the run's limit like the rest (a loaded machine once froze a shim between its
// process starting and its answer to the start, and RunOnce waited for the shim).
func TestFrozenShimAtStartReturnsAtDeadline(t *testing.T) { testFrozenShim(t, client.Created) }

// testFrozenShim freezes the run's shim once its task is seen in state at (or later).
func testFrozenShim(t *testing.T, at client.ProcessStatus) {
	const (
		limit  = 2 * time.Second
		grace  = time.Second
		freeze = 15 * time.Second // the old code returned only when the shim resumed
		slack  = 2 * time.Second  // a loaded 2-core machine
	)
	r, image := runnerEnv(t, WithOwner("fault-shim"), WithKillGrace(grace))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type outcome struct {
		res *port.RunResult
		err error
		at  time.Time
	}
	var (
		runID   string
		done    chan outcome
		id      string
		running time.Time
	)
	// On a loaded machine the run's 2 s can pass before the task is seen in state at:
	// that run ended unfrozen, and a new one is tried.
	for attempt := 1; ; attempt++ {
		runID = sandboxtest.RunID("frozen-shim")
		done = make(chan outcome, 1)
		go func() {
			res, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: image, Argv: []string{"/agent", "sleep", "60"}, Limits: port.Limits{Timeout: limit}})
			done <- outcome{res, err, time.Now()}
		}()
		ended := func() bool { return len(done) > 0 }
		if id, running = waitTask(ctx, t, r, runID, at, ended); id != "" {
			break
		}
		o := <-done
		if attempt == 3 {
			t.Fatalf("three runs ended before their task was seen %s; the last: %+v, %v", at, o.res, o.err)
		}
		t.Logf("run %s ended before its task was seen %s (%v): again", runID, at, o.err)
	}
	pid := shimPID(t, id)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume := func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume) // whatever happens, the shim runs again
	timer := time.AfterFunc(freeze, resume)
	defer timer.Stop()

	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		t.Fatal("RunOnce did not return")
	}
	stillFrozen := timer.Stop()
	if took := o.at.Sub(running); took > limit+grace+slack {
		t.Errorf("RunOnce returned %v after the task started, want at most limit %v + grace %v (+%v slack)", took, limit, grace, slack)
	}
	if !stillFrozen {
		t.Error("RunOnce returned only after the shim resumed")
	}
	var re *port.RunError
	if !errors.As(o.err, &re) || re.Code != port.CodeTimeout || o.res == nil || o.res.ErrorCode != port.CodeTimeout {
		t.Fatalf("RunOnce = %+v, %v; want a timeout", o.res, o.err)
	}
	if !bytes.Contains([]byte(o.err.Error()), []byte("not confirmed")) {
		t.Errorf("the error does not say the create or the kill was unconfirmed: %v", o.err)
	}

	resume()
	if _, err := r.Sweep(ctx, port.SweepOptions{RunID: runID}); err != nil {
		t.Errorf("Sweep: %v", err)
	}
	if left, err := leftovers(r)(ctx, runID); err != nil || len(left) > 0 {
		t.Errorf("left behind after Sweep: %v %v", left, err)
	}
}

// waitTask waits until runID's task is in state at (Created: it exists; Running: it
// runs), returning its container ID and when it was first seen so; "" when ended
// (if given) reports the run over first.
func waitTask(ctx context.Context, t *testing.T, r *Runner, runID string, at client.ProcessStatus, ended ...func() bool) (string, time.Time) {
	t.Helper()
	nctx := r.ns(ctx)
	for ctx.Err() == nil {
		if len(ended) > 0 && ended[0]() {
			return "", time.Time{}
		}
		cs, err := r.cli.Containers(nctx, fmt.Sprintf(`labels.%q==%q`, port.LabelRunID, runID))
		if err == nil && len(cs) == 1 {
			if task, err := cs[0].Task(nctx, nil); err == nil {
				if at == client.Created {
					return cs[0].ID(), time.Now()
				}
				if st, err := task.Status(nctx); err == nil && st.Status == at {
					return cs[0].ID(), time.Now()
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("run %s never reached %s", runID, at)
	return "", time.Time{}
}

// shimPID finds the shim of the test's own container: the containerd-shim process
// whose -namespace and -id are the test namespace and that container.
func shimPID(t *testing.T, containerID string) int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(raw, []byte("containerd-shim")) {
			continue
		}
		args := bytes.Split(bytes.TrimRight(raw, "\x00"), []byte{0})
		var ns, id string
		for i := 0; i+1 < len(args); i++ {
			switch string(args[i]) {
			case "-namespace":
				ns = string(args[i+1])
			case "-id":
				id = string(args[i+1])
			}
		}
		if ns == testNamespace && id == containerID {
			pid, err := strconv.Atoi(filepath.Base(d))
			if err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no shim for container %s", containerID)
	return 0
}
