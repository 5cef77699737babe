package session

import (
	"context"
	"errors"
	"fmt"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/port"
)

// failingFreezer fails its first fails freezes with err.
type failingFreezer struct {
	fails, calls int
	err          error
}

func (f *failingFreezer) Freeze(context.Context) error {
	f.calls++
	if f.calls <= f.fails {
		return f.err
	}
	return nil
}

func (f *failingFreezer) Thaw(context.Context) error { return nil }

// TestPauseRetriesTheRuntimesOwnFailure: a freeze the runtime failed for a reason of
// its own (runc's "unable to freeze" when a task does not stop in time, an internal
// error from Docker, an unknown one from containerd) is tried again; a refusal that
// says the request was wrong is not, and a freeze that keeps failing ends as not
// paused, with the runtime's error.
func TestPauseRetriesTheRuntimesOwnFailure(t *testing.T) {
	unableToFreeze := fmt.Errorf("Error response from daemon: OCI runtime pause failed: unable to freeze: unknown: %w", cerrdefs.ErrInternal)
	for _, tc := range []struct {
		name             string
		fails, wantCalls int
		err              error
		wantPaused       bool
	}{
		{"internal, then frozen", 2, 3, unableToFreeze, true},
		{"unknown (containerd), then frozen", 1, 2, fmt.Errorf("runc pause: %w", cerrdefs.ErrUnknown), true},
		{"internal every time", 99, freezeAttempts, unableToFreeze, false},
		{"not running: not retried", 99, 1, fmt.Errorf("container is not running: %w", cerrdefs.ErrConflict), false},
		{"not found: not retried", 99, 1, fmt.Errorf("%w: no such container", port.ErrNotFound), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHandle(t, "p")
			f := &failingFreezer{fails: tc.fails, err: tc.err}
			err := h.PauseWith(context.Background(), f, port.PauseOptions{})
			if f.calls != tc.wantCalls {
				t.Errorf("%d freezes, want %d", f.calls, tc.wantCalls)
			}
			if got := h.PauseState().Paused; got != tc.wantPaused {
				t.Errorf("paused %v, want %v (err %v)", got, tc.wantPaused, err)
			}
			if tc.wantPaused != (err == nil) || (err != nil && !errors.Is(err, tc.err)) {
				t.Errorf("err %v, want the runtime's %v", err, tc.err)
			}
			if rec, ok := readPause(h.Dir); ok && rec.Paused != tc.wantPaused {
				t.Errorf("the session's pause record says paused=%v, want %v", rec.Paused, tc.wantPaused)
			}
		})
	}
}

// TestPauseRetryEndsWithTheContext: a cancelled caller is not kept waiting for tries.
func TestPauseRetryEndsWithTheContext(t *testing.T) {
	h := newTestHandle(t, "c")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &failingFreezer{fails: 99, err: cerrdefs.ErrInternal}
	if err := h.PauseWith(ctx, f, port.PauseOptions{}); !errors.Is(err, cerrdefs.ErrInternal) || f.calls != 1 {
		t.Fatalf("err %v after %d freezes, want the runtime's error after 1", err, f.calls)
	}
}
