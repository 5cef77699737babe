package session

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/port"
)

// The set-up every runner's Start makes before it creates a session's sandbox, in
// one place so that the runners cannot drift apart.

// Root is the parent of a runner's session directories: the one configured
// (WithSessionDir), else DefaultRoot.
func Root(configured string) string {
	if configured != "" {
		return configured
	}
	return DefaultRoot()
}

// Check returns ss with its defaults, or why no runner starts it: its fields, or no
// bridge (sessions need it: it exposes the ports, ends the session at its lifetime
// even without a host, and bounds execs). Errors wrap port.ErrInvalidSpec.
func Check(ss port.SessionSpec, bridge bool) (port.SessionSpec, error) {
	ss = ss.WithDefaults()
	if err := ss.Validate(); err != nil {
		return ss, err
	}
	if !bridge {
		return ss, port.Invalidf("sessions need the runner's bridge (WithBridge)")
	}
	return ss, nil
}

// Setup is a session's host side, made before its sandbox: its directory under Root,
// when it starts and ends, and the labels its sandbox carries.
type Setup struct {
	// Name is the session's sandbox's name, which its directory under Root has too.
	Name            string
	Root, Dir       string
	Start, Deadline time.Time
	Labels          map[string]string
	// Lease is the session's run lease (PrepareLeased), held from before its sandbox
	// exists; nil without one.
	Lease *runlease.Lease
}

// Prepare creates the host directory of the session ss, named name under root, and
// returns its set-up: the deadline its lifetime gives, and the sandbox's labels (the
// owner's and the run's, the caller's, and the session's). Errors wrap
// port.ErrInternal; nothing is left behind then.
func Prepare(root, name, owner string, ss port.SessionSpec) (Setup, error) {
	dir, err := CreateDir(root, name, ss.User, ss.LogLimit)
	if err != nil {
		return Setup{}, fmt.Errorf("%w: %w", port.ErrInternal, err)
	}
	start := time.Now()
	st := Setup{Name: name, Root: root, Dir: dir, Start: start, Deadline: start.Add(ss.Limits.Timeout)}
	st.Labels = runner.ResourceLabels(owner, ss.RunID, port.KindSession, ss.Labels, start)
	for k, v := range Labels(ss, dir, st.Deadline) {
		st.Labels[k] = v
	}
	return st, nil
}

// PrepareLeased is Prepare, then the session's lease (HoldLease), held from before
// the sandbox exists so that another process's Sweep leaves it alone. Nothing is
// left behind on an error.
func PrepareLeased(root, name, owner string, ss port.SessionSpec) (Setup, error) {
	st, err := Prepare(root, name, owner, ss)
	if err != nil {
		return st, err
	}
	if st.Lease, err = HoldLease(owner, ss.RunID); err != nil {
		_ = RemoveDir(root, st.Dir)
		return Setup{}, err
	}
	return st, nil
}

// Abandon undoes Prepare or PrepareLeased for a session that did not start: its
// directory goes, its lease, if any, is released.
func (st Setup) Abandon() {
	_ = RemoveDir(st.Root, st.Dir)
	st.Lease.Release()
}

// Meta is the handle's description of the session ss set up as st, in the sandbox id.
func (st Setup) Meta(id string, ss port.SessionSpec) Meta {
	return Meta{ID: id, RunID: ss.RunID, Dir: st.Dir, Workspace: ss.WorkspaceDir, Ports: ss.Expose,
		LogLimit: ss.LogLimit, Deadline: st.Deadline, User: ss.User, Created: st.Start}
}

// Flags are the bridge's flags for the session ss: its ports exposed, its output kept
// from blocking the agent and written to the session's log, and, where the runtime
// pauses sessions (control), a moved deadline read from the control directory.
func Flags(ss port.SessionSpec, control bool) []string {
	f := append(append(BridgeFlags(ss.Expose), OutputFlags(ss.LogLimit)...), LogFlags()...)
	if control {
		f = append(f, ControlFlags()...)
	}
	return f
}

// Mount is a part of a session's host directory that its sandbox sees.
type Mount struct {
	// Name says which part it is ("expose", "log", "ctl"), for runtimes that name
	// their volumes.
	Name string
	// Source is the directory on the host, Target where the sandbox sees it.
	Source, Target string
	// ReadOnly is set for what only the host writes.
	ReadOnly bool
}

// Mounts are the parts of the session's directory its sandbox mounts, in this
// order: the exposed sockets' and the output log's directories, which the bridge
// writes, and, where the runtime pauses sessions (control), the control directory,
// read-only (only the host writes it). Flags tells the bridge where they are.
func (st Setup) Mounts(control bool) []Mount {
	m := []Mount{
		{Name: exposeDir, Source: ExposeDir(st.Dir), Target: ExposeTarget},
		{Name: logDir, Source: LogDir(st.Dir), Target: bridgeapi.SessionLogDir},
	}
	if control {
		m = append(m, Mount{Name: controlDir, Source: ControlDir(st.Dir), Target: ControlTarget, ReadOnly: true})
	}
	return m
}

// Ready waits until the session's exposed ports have their sockets (WaitSockets).
// When they do not, it calls halt (the runtime's watchers stop) and the error says
// how the session ended, if it did.
func (h *Handle) Ready(ctx context.Context, halt func()) error {
	err := WaitSockets(ctx, h.Dir, h.Ports, h.Done())
	if err == nil {
		return nil
	}
	halt()
	if _, werr := h.Result(); werr != nil {
		err = fmt.Errorf("%w (%w)", err, werr)
	}
	return err
}

// Steps are a runtime's own part of starting a session, which Launch walks. S is the
// runtime's session handle.
type Steps[S Launched] struct {
	// Op names the operation in errors ("docker.Start").
	Op string
	// Root, Owner and Bridge are the runner's: its sessions' root directory, its
	// owner, and whether it has a bridge.
	Root, Owner string
	Bridge      bool
	// Leased says whether the session holds a run lease from before its sandbox
	// exists (HoldLease: a runtime on this host, whose Sweep honours it).
	Leased bool
	// Check refuses what the runtime cannot start (the spec against the runtime, an
	// engine that does not answer, the image), may resolve ss's image, and returns
	// the name of the session's sandbox (Setup.Name for the steps after it).
	Check func(ctx context.Context, ss *port.SessionSpec) (name string, err error)
	// Create makes the session's sandbox as st sets it up; nothing is left of it on
	// an error.
	Create func(ctx context.Context, ss port.SessionSpec, st Setup) error
	// Remove removes the sandbox Create made, when the start fails after it.
	Remove func(ctx context.Context, st Setup)
	// Start starts the sandbox and returns its handle (st.Meta, st.Lease), halted on
	// an error.
	Start func(ctx context.Context, ss port.SessionSpec, st Setup) (S, error)
	// Halt stops the handle's watchers when its exposed ports never come up.
	Halt func(S)
	// Started, if set, says the session started (a debug log).
	Started func(S)
}

// Launched is what Launch needs of a runtime's session handle: a port.Session with
// the Handle's Ready.
type Launched interface {
	port.Session
	Ready(ctx context.Context, halt func()) error
}

// Launch is port.SessionRunner.Start around a runtime's steps, in one place so that
// the runtimes cannot drift apart: ss checked (Check, then the runtime's Check), the
// session's directory, labels and lease made (Prepare, PrepareLeased), the sandbox
// created and started, its exposed ports' sockets awaited (Handle.Ready). When the
// start fails, the sandbox is removed (with a context the caller cannot cancel) and
// the directory and lease go. Errors are the steps', in a *port.OpError of op.
func Launch[S Launched](ctx context.Context, ss port.SessionSpec, steps Steps[S]) (_ port.Session, err error) {
	if ss, err = Check(ss, steps.Bridge); err != nil {
		return nil, runner.OpErr(steps.Op, ss.RunID, err)
	}
	name, err := steps.Check(ctx, &ss)
	if err != nil {
		return nil, runner.OpErr(steps.Op, ss.RunID, err)
	}
	var st Setup
	if steps.Leased {
		// Held from before the sandbox exists: another process's Sweep leaves it alone.
		st, err = PrepareLeased(steps.Root, name, steps.Owner, ss)
	} else {
		st, err = Prepare(steps.Root, name, steps.Owner, ss)
	}
	if err != nil {
		return nil, runner.OpErr(steps.Op, ss.RunID, err)
	}
	created := false
	defer func() {
		if err != nil {
			if created {
				steps.Remove(context.WithoutCancel(ctx), st)
			}
			st.Abandon()
		}
	}()
	if err := steps.Create(ctx, ss, st); err != nil {
		return nil, runner.OpErr(steps.Op, ss.RunID, err)
	}
	created = true
	s, err := steps.Start(ctx, ss, st)
	if err != nil {
		return nil, runner.OpErr(steps.Op, ss.RunID, err)
	}
	if err := s.Ready(ctx, func() { steps.Halt(s) }); err != nil {
		return nil, runner.OpErr(steps.Op, ss.RunID, err)
	}
	if steps.Started != nil {
		steps.Started(s)
	}
	return s, nil
}
