package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/port"
)

// HoldLease takes the lease of owner's session runID for a handle about to be made
// (Start takes it before the sandbox exists, Attach before it watches): while the
// handle is open, another process's Sweep leaves the session alone whatever its
// grace; a detached session has no lease and is swept by its heartbeat. One it cannot
// take is port.ErrInternal.
func HoldLease(owner, runID string) (*runlease.Lease, error) {
	l, err := runlease.Hold(runlease.DefaultRoot(), owner, runID, runlease.KindSession)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", port.ErrInternal, err)
	}
	return l, nil
}

// Reattach reads back the labels lbls of a session's sandbox id (ParseLabels) and
// holds the session's lease (HoldLease): what a runtime's Attach needs before it
// makes the handle. On an error the Meta has the run id once the labels gave one.
func Reattach(owner, root, id string, lbls map[string]string) (Meta, *runlease.Lease, error) {
	m, err := ParseLabels(owner, root, lbls)
	if err != nil {
		return Meta{}, nil, err
	}
	m.ID = id
	lease, err := HoldLease(owner, m.RunID)
	if err != nil {
		return m, nil, err
	}
	return m, lease, nil
}

// Handle is the state every adapter's session shares: identity, the output log, the
// exit result, the heartbeat loop, the watchers, the lease, the file and socket
// access, Stop's and Detach's sequence (end.go). Adapters embed it and add Exec and
// their runtime's steps.
type Handle struct {
	Meta

	// log is the session's output log, opened with the handle (a handle's files stay
	// readable once Stop removed the directory); logErr says why it could not be.
	log    *logFiles
	logErr error

	done     chan struct{}
	once     sync.Once
	mu       sync.Mutex
	res      *port.RunResult
	err      error
	final    *port.LogSnapshot // the log at Finish
	detached bool
	stopBeat chan struct{}
	beatOnce sync.Once
	lease    *runlease.Lease // held while the handle is open (see HoldLease)
	// OnFinish, if set (before the handle is shared), runs once when the session
	// ends or the handle is detached: the adapters' live-sessions count.
	OnFinish func()
	// life is the deadline as pauses move it, and the pause state (pause.go).
	life lifetime
	// Watch are the goroutines that follow the sandbox (end.go).
	Watch Watchers
	// stop says whether Stop began (the exit is then no failure) and finished.
	stop struct {
		sync.Mutex
		stopping, stopped bool
	}
}

// NewHandle returns a handle for m, with its session's output log open, and starts its
// heartbeat loop. lease (HoldLease), if not nil, is the handle's: released when the
// session ends or the handle is detached.
func NewHandle(m Meta, lease *runlease.Lease) *Handle {
	h := &Handle{Meta: m, done: make(chan struct{}), stopBeat: make(chan struct{}), lease: lease}
	h.log, h.logErr = openLog(m.Dir, m.LogLimit)
	d := m.Deadline
	if moved, ok := ReadDeadline(m.Dir); ok && !d.IsZero() && moved.After(d) {
		d = moved // a resume moved it (a handle rebuilt by Attach)
	}
	h.life.init(d)
	go h.beat()
	return h
}

func (h *Handle) beat() {
	t := time.NewTicker(HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			_ = Heartbeat(h.Dir)
		case <-h.stopBeat:
			return
		}
	}
}

// StopHeartbeat ends the heartbeat loop.
func (h *Handle) StopHeartbeat() { h.beatOnce.Do(func() { close(h.stopBeat) }) }

// Finish records the session's end, now (see FinishAt).
func (h *Handle) Finish(res *port.RunResult, err error) { h.FinishAt(res, err, time.Now()) }

// FinishAt records the session's end at ended (once; later calls are ignored) and
// closes Done. res gets what the log holds of the output (Stdout, Stderr; Truncated
// and Dropped say how much came before) and, unless the adapter set it, the Duration
// from the sandbox's creation to ended.
func (h *Handle) FinishAt(res *port.RunResult, err error, ended time.Time) {
	h.once.Do(func() {
		snap, serr := h.LogSnapshot()
		if res != nil {
			if res.Duration == 0 && !h.Created.IsZero() && !ended.IsZero() {
				res.Duration = max(0, ended.Sub(h.Created))
			}
			if serr == nil {
				res.Stdout, res.Stderr = snap.Stdout, snap.Stderr
				res.StdoutDropped, res.StderrDropped = snap.Start.Stdout, snap.Start.Stderr
				res.StdoutTruncated, res.StderrTruncated = snap.Start.Stdout > 0, snap.Start.Stderr > 0
			}
		}
		h.mu.Lock()
		h.res, h.err = res, err
		if serr == nil {
			h.final = &snap
		}
		h.mu.Unlock()
		h.StopHeartbeat()
		h.lease.Release() // ended or detached: the heartbeat decides from now on
		close(h.done)
		if h.OnFinish != nil {
			h.OnFinish()
		}
	})
}

// CloseLog closes the handle's log files (Stop and Detach, once the handle is done
// with them); Logs and LogSnapshot then give what the log held at Finish.
func (h *Handle) CloseLog() {
	h.mu.Lock()
	l := h.log
	h.log = nil
	if h.logErr == nil {
		h.logErr = fmt.Errorf("%w: the session's log is closed", port.ErrClosed)
	}
	h.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
}

// LogSnapshot implements port.LogFollower: what the log holds now (what it held at
// Finish once the handle closed its log).
func (h *Handle) LogSnapshot() (port.LogSnapshot, error) {
	h.mu.Lock()
	l, lerr, final := h.log, h.logErr, h.final
	h.mu.Unlock()
	if l == nil {
		if final != nil {
			return *final, nil
		}
		return port.LogSnapshot{}, lerr
	}
	return l.snapshot()
}

// StderrTail returns the last n bytes of stderr the log holds (the bridge's notices
// end it: exec failures, OOM kills), for classifying the session's end.
func (h *Handle) StderrTail(n int) []byte {
	snap, err := h.LogSnapshot()
	if err != nil {
		return nil
	}
	return snap.Stderr[max(0, len(snap.Stderr)-n):]
}

// Follow implements port.LogFollower: a reader of the session's log with its own open
// files, which ends with io.EOF once the session has ended, or ErrClosed once this
// handle stopped watching it (Detach).
func (h *Handle) Follow(_ context.Context, opts port.FollowOptions) (port.LogReader, error) {
	if h.Detached() {
		return nil, fmt.Errorf("%w: the handle was detached", port.ErrClosed)
	}
	r, err := newLogReader(h.Dir, h.LogLimit, opts, h.done, h.Detached)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: session %s has ended and its log is gone: %v", port.ErrClosed, h.Meta.RunID, err)
	}
	return r, err
}

// MarkDetached makes Wait return port.ErrClosed and closes Done.
func (h *Handle) MarkDetached() {
	h.mu.Lock()
	h.detached = true
	h.mu.Unlock()
	h.Finish(nil, fmt.Errorf("%w: the handle was detached", port.ErrClosed))
}

// Detached reports whether MarkDetached was called.
func (h *Handle) Detached() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.detached
}

// ID implements port.Session.
func (h *Handle) ID() string { return h.Meta.ID }

// RunID implements port.Session.
func (h *Handle) RunID() string { return h.Meta.RunID }

// Done implements port.Session.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Result returns the recorded end, once Done is closed.
func (h *Handle) Result() (*port.RunResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.res == nil {
		return nil, h.err
	}
	r := *h.res
	return &r, h.err
}

// Wait implements port.Session.
func (h *Handle) Wait(ctx context.Context) (*port.RunResult, error) {
	select {
	case <-h.done:
		return h.Result()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Logs implements port.Session: what the log holds of each stream.
func (h *Handle) Logs() ([]byte, []byte) {
	snap, _ := h.LogSnapshot()
	return snap.Stdout, snap.Stderr
}

// Expose implements port.Session.
func (h *Handle) Expose(p int) (string, error) {
	if !slices.Contains(h.Ports, p) {
		return "", fmt.Errorf("%w: port %d is not exposed by session %s", port.ErrNotFound, p, h.Meta.RunID)
	}
	return ExposeDir(h.Dir) + "/" + SocketName(p), nil
}

// Dial implements port.Session.
func (h *Handle) Dial(ctx context.Context, p int) (net.Conn, error) {
	if !slices.Contains(h.Ports, p) {
		return nil, fmt.Errorf("%w: port %d is not exposed by session %s", port.ErrNotFound, p, h.Meta.RunID)
	}
	select {
	case <-h.done:
		if !h.Detached() {
			return nil, fmt.Errorf("%w: session %s has ended", port.ErrClosed, h.Meta.RunID)
		}
	default:
	}
	if err := h.CheckRunning(); err != nil {
		return nil, err
	}
	return Dial(ctx, h.Dir, p)
}

// ReadFile implements port.Session.
func (h *Handle) ReadFile(name string, max int64) ([]byte, error) {
	return ReadFile(h.Workspace, name, max)
}

// WriteFile implements port.Session.
func (h *Handle) WriteFile(name string, data []byte, perm fs.FileMode) error {
	return WriteFile(h.Workspace, name, data, perm)
}

// Heartbeat implements port.Session.
func (h *Handle) Heartbeat() error { return Heartbeat(h.Dir) }

// ExecTimeout bounds an exec by the session's deadline.
func (h *Handle) ExecTimeout(d time.Duration) time.Duration {
	if dl := h.CurrentDeadline(); !dl.IsZero() {
		if left := time.Until(dl); left < d {
			return max(left, time.Millisecond)
		}
	}
	return d
}
