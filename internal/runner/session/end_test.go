package session

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

func newTestHandle(t *testing.T, name string) *Handle {
	t.Helper()
	root := t.TempDir()
	dir, err := CreateDir(root, name, "1001:1001", 64)
	if err != nil {
		t.Fatal(err)
	}
	return NewHandle(Meta{ID: name, RunID: "r-" + name, Dir: dir, LogLimit: 64}, nil)
}

// TestStopWithSequence: Stop thaws, ends the sandbox only while the session runs,
// stops the watchers before removing the sandbox, removes the session's directory,
// marks the session stopping for its watchers, and a second Stop returns the first's
// result without touching the sandbox again.
func TestStopWithSequence(t *testing.T) {
	h := newTestHandle(t, "s1")
	root := h.Dir[:len(h.Dir)-len("/s1")]
	wctx := h.Watch.Context(context.Background())
	var watcherDone atomic.Bool
	h.Watch.Go(func() {
		<-wctx.Done()
		watcherDone.Store(true)
	})
	var steps []string
	st := Stopper{
		Thaw: func(context.Context) { steps = append(steps, "thaw") },
		End: func(context.Context) {
			if !h.Stopping() {
				t.Error("End runs before the session is marked stopping")
			}
			steps = append(steps, "end")
			h.Finish(&port.RunResult{ExitCode: 143}, nil)
		},
		Remove: func(context.Context) {
			if !watcherDone.Load() {
				t.Error("Remove runs while a watcher still runs")
			}
			steps = append(steps, "remove")
		},
		Root: root,
		Log:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	res, err := h.StopWith(context.Background(), st)
	if err != nil || res.ExitCode != 143 {
		t.Fatalf("Stop = %+v, %v; want the exit the sandbox ended with", res, err)
	}
	if got := len(steps); got != 3 || steps[0] != "thaw" || steps[1] != "end" || steps[2] != "remove" {
		t.Fatalf("steps %v, want thaw, end, remove", steps)
	}
	if _, err := os.Stat(h.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the session's directory is still there: %v", err)
	}
	steps = nil
	if res, err := h.StopWith(context.Background(), st); err != nil || res.ExitCode != 143 || len(steps) != 0 {
		t.Errorf("second Stop = %+v, %v, steps %v; want the first's result and no step", res, err, steps)
	}

	// A session that already ended is not ended again; its result is -1 when no
	// exit was seen.
	h2 := newTestHandle(t, "s2")
	h2.MarkDetached()
	ended := false
	st.Thaw, st.End = nil, func(context.Context) { ended = true }
	st.Remove = func(context.Context) {}
	if _, err := h2.StopWith(context.Background(), st); !errors.Is(err, port.ErrClosed) || ended {
		t.Errorf("Stop of a detached handle: %v, ended %v", err, ended)
	}
}

// TestTerminateEscalates: SIGTERM first; the kill only when the session outlives
// the grace, with the kill context, and not at all when it ends in time.
func TestTerminateEscalates(t *testing.T) {
	h := newTestHandle(t, "s1")
	var killed bool
	term := func() {}
	kill := func(ctx context.Context) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("kill without the kill context's deadline")
		}
		killed = true
		h.Finish(&port.RunResult{ExitCode: 137}, nil)
	}
	killCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 5*time.Second)
	}
	start := time.Now()
	h.Terminate(context.Background(), 50*time.Millisecond, term, kill, killCtx)
	if !killed || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("killed %v after %v; want a kill after the grace", killed, time.Since(start))
	}

	h2 := newTestHandle(t, "s2")
	killed = false
	h2.Terminate(context.Background(), time.Minute, func() { h2.Finish(&port.RunResult{ExitCode: 0}, nil) }, kill, killCtx)
	if killed {
		t.Error("a session that ended on SIGTERM was killed")
	}
}

// TestBeginExec: defaults applied; a bad spec, an ended session and a paused one
// are refused with their sentinels.
func TestBeginExec(t *testing.T) {
	h := newTestHandle(t, "s1")
	es, err := h.BeginExec(port.ExecSpec{Argv: []string{"true"}})
	if err != nil || es.OutputLimit == 0 || es.Timeout == 0 {
		t.Fatalf("BeginExec = %+v, %v; want the defaults", es, err)
	}
	if _, err := h.BeginExec(port.ExecSpec{}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("no argv: %v", err)
	}
	h.life.mu.Lock()
	h.life.rec.Paused = true
	h.life.mu.Unlock()
	if _, err := h.BeginExec(port.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, port.ErrPaused) {
		t.Errorf("paused: %v", err)
	}
	h.Finish(&port.RunResult{}, nil)
	if _, err := h.BeginExec(port.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, port.ErrClosed) {
		t.Errorf("ended: %v", err)
	}
}
