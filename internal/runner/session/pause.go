package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/ctxsleep"
	"github.com/agentsandbox/sandbox/port"
)

// ControlTarget is where a session's control directory appears inside the sandbox,
// read-only: the host writes there what the bridge must learn while the sandbox runs
// (a deadline moved by a pause that stopped the clock).
const ControlTarget = "/.agentsandbox/ctl"

// Names in a session's host directory that pauses use. The control directory is
// mounted read-only; the pause record is out of the sandbox's reach.
const (
	controlDir   = "ctl"
	deadlineFile = "deadline"
	pauseFile    = "pause.json"
)

// ControlDir is the part of a session's host directory mounted read-only at
// ControlTarget.
func ControlDir(dir string) string { return filepath.Join(dir, controlDir) }

// ControlFlags are the bridge's flags that make it read a moved deadline from the
// control directory before it ends the session at its own.
func ControlFlags() []string {
	return []string{"-" + bridgeapi.FlagDeadlineFile, ControlTarget + "/" + deadlineFile}
}

// createControl makes the control directory (readable by everyone, writable by the
// host only).
func createControl(dir string) error {
	if err := os.Mkdir(ControlDir(dir), 0o755); err != nil {
		return fmt.Errorf("control dir: %w", err)
	}
	return nil
}

// WriteDeadline records the session's deadline t where the bridge inside reads it
// (atomically: a reader sees the old value or the new one).
func WriteDeadline(dir string, t time.Time) error {
	return writeAtomic(ControlDir(dir), deadlineFile, bridgeapi.FormatDeadline(t), 0o644)
}

// ReadDeadline returns the deadline last written by WriteDeadline, if any.
func ReadDeadline(dir string) (time.Time, bool) {
	b, err := readSmall(filepath.Join(ControlDir(dir), deadlineFile), bridgeapi.MaxDeadlineFileBytes)
	if err != nil {
		return time.Time{}, false
	}
	t, err := bridgeapi.ParseDeadline(b)
	return t, err == nil
}

// pauseRecord is what a handle rebuilt by Attach needs of a pause: the runtime only
// says whether the sandbox is frozen.
type pauseRecord struct {
	Paused    bool          `json:"paused"`
	Since     time.Time     `json:"since"`
	StopClock bool          `json:"stop_clock"`
	PausedFor time.Duration `json:"paused_for_ns"`
}

func readPause(dir string) (pauseRecord, bool) {
	var r pauseRecord
	b, err := readSmall(filepath.Join(dir, pauseFile), 4096)
	if err != nil || json.Unmarshal(b, &r) != nil {
		return pauseRecord{}, false
	}
	return r, true
}

func writePause(dir string, r pauseRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeAtomic(dir, pauseFile, b, 0o600)
}

// readSmall reads a host-written file of at most max bytes, refusing a link or
// anything but a regular file.
func readSmall(name string, max int64) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is over %d bytes", name, max)
	}
	return b, nil
}

func writeAtomic(dir, name string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Chmod(perm), f.Close()); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// Freezer is the runtime's side of a pause: the cgroup freezer of the session's
// sandbox.
type Freezer interface {
	// Freeze freezes every process of the sandbox.
	Freeze(ctx context.Context) error
	// Thaw thaws them.
	Thaw(ctx context.Context) error
}

// lifetime is a handle's deadline, which a resume after a pause that stopped the
// clock moves, and whether it is held (paused with the clock stopped).
type lifetime struct {
	mu       sync.Mutex
	deadline time.Time
	held     bool
	changed  chan struct{} // closed and replaced when deadline or held change

	// pauseMu orders Pause and Resume (held across the runtime's call).
	pauseMu sync.Mutex
	rec     pauseRecord
}

func (l *lifetime) init(d time.Time) {
	l.deadline = d
	l.changed = make(chan struct{})
}

// set changes the deadline and the hold, waking the watchers (l.mu held).
func (l *lifetime) set(d time.Time, held bool) {
	l.deadline, l.held = d, held
	close(l.changed)
	l.changed = make(chan struct{})
}

// CurrentDeadline is when the session's lifetime ends now (zero: never).
func (h *Handle) CurrentDeadline() time.Time {
	h.life.mu.Lock()
	defer h.life.mu.Unlock()
	return h.life.deadline
}

// Lifetime is a watcher's timer for the session's lifetime: it follows the
// deadline as resumes move it, and does not fire while a pause holds the clock.
type Lifetime struct {
	h       *Handle
	t       *time.Timer
	c       <-chan time.Time
	changed <-chan struct{}
}

// NewLifetime returns an armed lifetime timer. Stop it when done.
func (h *Handle) NewLifetime() *Lifetime {
	l := &Lifetime{h: h}
	l.Rearm()
	return l
}

// C fires when the lifetime ends (nil while there is none, or it is held).
func (l *Lifetime) C() <-chan time.Time { return l.c }

// Changed is closed when the deadline moved or its hold changed: call Rearm.
func (l *Lifetime) Changed() <-chan struct{} { return l.changed }

// Rearm sets the timer to the current deadline.
func (l *Lifetime) Rearm() {
	l.Stop()
	l.h.life.mu.Lock()
	d, held := l.h.life.deadline, l.h.life.held
	l.changed = l.h.life.changed
	l.h.life.mu.Unlock()
	if d.IsZero() || held {
		return
	}
	l.t = time.NewTimer(time.Until(d))
	l.c = l.t.C
}

// Disarm stops the timer until the next change.
func (l *Lifetime) Disarm() { l.Stop() }

// Stop stops the timer.
func (l *Lifetime) Stop() {
	if l.t != nil {
		l.t.Stop()
	}
	l.t, l.c = nil, nil
}

// PauseState implements port.PausableSession.
func (h *Handle) PauseState() port.PauseState {
	h.life.mu.Lock()
	defer h.life.mu.Unlock()
	r := h.life.rec
	st := port.PauseState{Paused: r.Paused, StopClock: r.StopClock && r.Paused, Deadline: h.life.deadline, PausedFor: r.PausedFor}
	if r.Paused {
		st.Since = r.Since
	}
	return st
}

// CheckRunning returns an error wrapping port.ErrPaused while the session is paused.
func (h *Handle) CheckRunning() error {
	h.life.mu.Lock()
	paused := h.life.rec.Paused
	h.life.mu.Unlock()
	if paused {
		return fmt.Errorf("%w: resume session %s first", port.ErrPaused, h.Meta.RunID)
	}
	return nil
}

// InitPause sets a handle rebuilt by Attach from the runtime's state (frozen or not)
// and the pause record in the session's directory.
func (h *Handle) InitPause(frozen bool) {
	rec, ok := readPause(h.Dir)
	if !ok {
		rec = pauseRecord{}
	}
	if frozen && !rec.Paused {
		// Frozen by someone else (or the record was lost): a pause that lets the clock run.
		rec = pauseRecord{Paused: true, Since: time.Now(), PausedFor: rec.PausedFor}
	}
	if !frozen {
		rec.Paused, rec.StopClock, rec.Since = false, false, time.Time{}
	}
	h.life.mu.Lock()
	h.life.rec = rec
	h.life.set(h.life.deadline, rec.Paused && rec.StopClock)
	h.life.mu.Unlock()
}

// PauseWith freezes the session through f (see port.PausableSession.Pause). The
// record goes to the session's directory first, so a host that dies in between
// leaves one the next Attach reads against the runtime's state.
func (h *Handle) PauseWith(ctx context.Context, f Freezer, opts port.PauseOptions) error {
	h.life.pauseMu.Lock()
	defer h.life.pauseMu.Unlock()
	if err := h.checkLive(); err != nil {
		return err
	}
	h.life.mu.Lock()
	prev := h.life.rec
	h.life.mu.Unlock()
	if prev.Paused {
		return nil
	}
	rec := pauseRecord{Paused: true, Since: time.Now(), StopClock: opts.StopClock, PausedFor: prev.PausedFor}
	if err := writePause(h.Dir, rec); err != nil {
		return fmt.Errorf("%w: recording the pause: %w", port.ErrInternal, err)
	}
	if err := freeze(ctx, f); err != nil {
		_ = writePause(h.Dir, prev)
		return err
	}
	h.life.mu.Lock()
	h.life.rec = rec
	h.life.set(h.life.deadline, rec.StopClock)
	h.life.mu.Unlock()
	return nil
}

// freezeAttempts bounds freeze's tries (waits of 50, 100 and 200 ms between them).
const freezeAttempts = 4

// freeze asks f to freeze the sandbox, again after a short wait when the runtime
// failed for a reason of its own (an internal or unknown error). runc gives up
// freezing a cgroup whose tasks do not stop in time, thaws it and answers "unable to
// freeze": a task in uninterruptible sleep on a loaded machine is enough, and a try a
// moment later succeeds. What says the request was wrong (not found, not running,
// unsupported) is not retried.
func freeze(ctx context.Context, f Freezer) error {
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := f.Freeze(ctx)
		if err == nil || attempt == freezeAttempts || !(cerrdefs.IsInternal(err) || cerrdefs.IsUnknown(err)) {
			return err
		}
		if !ctxsleep.Sleep(ctx, wait) {
			return err
		}
		wait *= 2
	}
}

// ResumeWith thaws the session through f (see port.PausableSession.Resume). A
// pause that stopped the clock moves the deadline by its length, written for the
// bridge before the sandbox thaws (the bridge reads it when its own deadline
// passes, which may be at once).
func (h *Handle) ResumeWith(ctx context.Context, f Freezer) error {
	h.life.pauseMu.Lock()
	defer h.life.pauseMu.Unlock()
	if err := h.checkLive(); err != nil {
		return err
	}
	h.life.mu.Lock()
	rec, deadline := h.life.rec, h.life.deadline
	h.life.mu.Unlock()
	if !rec.Paused {
		return nil
	}
	if rec.StopClock && !deadline.IsZero() {
		d := time.Since(rec.Since)
		if d < 0 {
			d = 0
		}
		rec.PausedFor += d
		deadline = deadline.Add(d)
		if err := WriteDeadline(h.Dir, deadline); err != nil {
			return fmt.Errorf("%w: recording the moved deadline: %w", port.ErrInternal, err)
		}
	}
	if err := f.Thaw(ctx); err != nil {
		return err
	}
	rec.Paused, rec.StopClock, rec.Since = false, false, time.Time{}
	if err := writePause(h.Dir, rec); err != nil {
		// The sandbox runs: the record only matters to an Attach, which asks the
		// runtime first.
		_ = err
	}
	h.life.mu.Lock()
	h.life.rec = rec
	h.life.set(deadline, false)
	h.life.mu.Unlock()
	return nil
}

// ThawForStop thaws a paused session about to be stopped (a frozen process cannot
// act on SIGTERM), without moving its deadline. It reports whether it was paused.
func (h *Handle) ThawForStop(ctx context.Context, f Freezer) bool {
	h.life.pauseMu.Lock()
	defer h.life.pauseMu.Unlock()
	h.life.mu.Lock()
	paused := h.life.rec.Paused
	h.life.mu.Unlock()
	if !paused {
		return false
	}
	_ = f.Thaw(ctx)
	h.life.mu.Lock()
	h.life.rec.Paused, h.life.rec.StopClock = false, false
	h.life.set(h.life.deadline, false)
	h.life.mu.Unlock()
	return true
}

func (h *Handle) checkLive() error {
	select {
	case <-h.done:
		return fmt.Errorf("%w: session %s has ended", port.ErrClosed, h.Meta.RunID)
	default:
		return nil
	}
}
