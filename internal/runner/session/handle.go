package session

import (
	"context"
	"fmt"
	"io"
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

// Handle is the state every adapter's session shares: identity, rings, the exit
// result, the heartbeat loop and the file and socket access. Adapters embed it and add
// Stop, Exec and Detach.
type Handle struct {
	Meta
	Stdout, Stderr *Ring
	// outC and errC feed the rings (see Writers).
	outC, errC *counter

	done     chan struct{}
	once     sync.Once
	mu       sync.Mutex
	res      *port.RunResult
	err      error
	detached bool
	stopBeat chan struct{}
	beatOnce sync.Once
	lease    *runlease.Lease // held while the handle is open (see HoldLease)
	// OnFinish, if set (before the handle is shared), runs once when the session
	// ends or the handle is detached: the adapters' live-sessions count.
	OnFinish func()
	// life is the deadline as pauses move it, and the pause state (pause.go).
	life lifetime
}

// NewHandle returns a handle for m and starts its heartbeat loop. lease (HoldLease),
// if not nil, is the handle's: released when the session ends or the handle is
// detached.
func NewHandle(m Meta, lease *runlease.Lease) *Handle {
	h := &Handle{Meta: m, Stdout: NewRing(m.LogLimit), Stderr: NewRing(m.LogLimit), done: make(chan struct{}), stopBeat: make(chan struct{}), lease: lease}
	h.outC, h.errC = &counter{ring: h.Stdout, name: "stdout"}, &counter{ring: h.Stderr, name: "stderr"}
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

// Finish records the session's end (once; later calls are ignored) and closes Done.
// res gets the rings' contents.
func (h *Handle) Finish(res *port.RunResult, err error) {
	h.once.Do(func() {
		h.outC.flush()
		h.errC.flush()
		if res != nil {
			res.Stdout, res.StdoutTruncated = h.Stdout.Bytes()
			res.Stderr, res.StderrTruncated = h.Stderr.Bytes()
			res.StdoutDropped, res.StderrDropped = h.Dropped()
		}
		h.mu.Lock()
		h.res, h.err = res, err
		h.mu.Unlock()
		h.StopHeartbeat()
		h.lease.Release() // ended or detached: the heartbeat decides from now on
		close(h.done)
		if h.OnFinish != nil {
			h.OnFinish()
		}
	})
}

// Writers are where an adapter writes the session's stdout and stderr: into the
// rings, with the bridge's offset marks taken out and the output this handle never
// received counted (see Dropped).
func (h *Handle) Writers() (stdout, stderr io.Writer) { return h.outC, h.errC }

// Dropped returns how many bytes of each stream this handle never received: what the
// bridge dropped while no host read (its notices) and what the runtime's log had
// rotated out before this handle attached (the bridge's marks show it).
func (h *Handle) Dropped() (stdout, stderr int64) { return h.outC.counts(), h.errC.counts() }

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

// Logs implements port.Session.
func (h *Handle) Logs() ([]byte, []byte) {
	o, _ := h.Stdout.Bytes()
	e, _ := h.Stderr.Bytes()
	return o, e
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
