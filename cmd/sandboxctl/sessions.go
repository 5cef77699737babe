package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/sandbox/port"
)

// attach re-attaches to session id of the owner on the runtime.
func attach(ctx context.Context, c common, id string) (port.Session, func(), error) {
	if c.owner == "" {
		return nil, nil, port.Invalidf("--owner is required (sessions are attached by their owner only)")
	}
	switch c.runtime {
	case "docker":
		r, err := dockerRunner(c)
		if err != nil {
			return nil, nil, err
		}
		s, err := r.Attach(ctx, id)
		return s, func() {}, err
	case "containerd":
		r, err := containerdRunner(c)
		if err != nil {
			return nil, nil, err
		}
		s, err := r.Attach(ctx, id)
		if err != nil {
			r.Close()
			return nil, nil, err
		}
		return s, func() { r.Close() }, nil
	}
	return nil, nil, port.Invalidf("--runtime must be docker or containerd for a session, not %q", c.runtime)
}

func cmdExec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlags("exec", stderr, &c)
	timeout := fs.Duration("timeout", time.Minute, "bound on the command")
	workdir := fs.String("w", "", "working `directory` in the sandbox (default the workspace)")
	if err := fs.Parse(args); err != nil {
		return parseCode(err)
	} else if fs.NArg() < 2 {
		fmt.Fprintln(stderr, "usage: sandboxctl exec --owner O --runtime R ID [--] CMD [ARG...]")
		return exitUsage
	}
	id, argv := fs.Arg(0), fs.Args()[1:]
	if argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return exitUsage
	}
	s, done, err := attach(ctx, c, id)
	if err != nil {
		return errCode(stderr, "exec", err)
	}
	defer done()
	defer s.Detach()
	spec := port.ExecSpec{Argv: argv, Dir: *workdir, Timeout: *timeout}
	if !c.json {
		spec.Stdout, spec.Stderr = stdout, stderr
	}
	res, err := s.Exec(ctx, spec)
	if c.json && res != nil {
		_ = json.NewEncoder(stdout).Encode(map[string]any{"exit_code": res.ExitCode, "stdout": string(res.Stdout), "stderr": string(res.Stderr),
			"stdout_truncated": res.StdoutTruncated, "stderr_truncated": res.StderrTruncated, "duration_ns": res.Duration})
	}
	if err != nil {
		return errCode(stderr, "exec", err)
	}
	// Like docker exec: the command's own exit code, when it is one.
	if res.ExitCode > 0 && res.ExitCode < 256 {
		return res.ExitCode
	}
	return exitOK
}

func cmdStop(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlags("stop", stderr, &c)
	grace := fs.Duration("grace", 10*time.Second, "time between SIGTERM and SIGKILL")
	if err := fs.Parse(args); err != nil {
		return parseCode(err)
	} else if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: sandboxctl stop --owner O --runtime R [--grace D] ID")
		return exitUsage
	}
	s, done, err := attach(ctx, c, fs.Arg(0))
	if err != nil {
		return errCode(stderr, "stop", err)
	}
	defer done()
	res, err := s.Stop(ctx, *grace)
	if c.json {
		out := map[string]any{"id": fs.Arg(0), "run_id": s.RunID(), "stopped": err == nil}
		if res != nil {
			out["exit_code"] = res.ExitCode
			out["error_code"] = res.ErrorCode
		}
		_ = json.NewEncoder(stdout).Encode(out)
	} else if err == nil {
		fmt.Fprintf(stdout, "stopped %s (run %s, exit %d)\n", fs.Arg(0), s.RunID(), res.ExitCode)
	}
	if err != nil {
		return errCode(stderr, "stop", err)
	}
	return exitOK
}

func cmdLogs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlags("logs", stderr, &c)
	follow := fs.Bool("follow", false, "keep streaming until the session ends or Ctrl-C")
	wait := fs.Duration("for", 2*time.Second, "without --follow: how long to collect output")
	if err := fs.Parse(args); err != nil {
		return parseCode(err)
	} else if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: sandboxctl logs --owner O --runtime R [--follow] ID")
		return exitUsage
	}
	s, done, err := attach(ctx, c, fs.Arg(0))
	if err != nil {
		return errCode(stderr, "logs", err)
	}
	defer done()
	defer s.Detach()
	// On stderr, so stdout is the session's output only.
	fmt.Fprintf(stderr, "sandboxctl: following session %s (run %s): its output from now on\n", fs.Arg(0), s.RunID())
	// An attached handle sees the session's output from now on (the ring of the
	// host that started it holds what came before); print what arrives.
	var outTail, errTail tail
	emit := func() {
		o, e := s.Logs()
		outTail.write(stdout, o)
		errTail.write(stderr, e)
	}
	var stopAt <-chan time.Time
	if !*follow {
		stopAt = time.After(*wait)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			emit()
		case <-s.Done():
			emit()
			return exitOK
		case <-stopAt:
			emit()
			return exitOK
		case <-ctx.Done():
			emit()
			return exitOK
		}
	}
}

// tail follows a session's log ring, which holds the last bytes only: it keeps the
// end of what it printed and prints what follows that end in the next snapshot (all
// of the snapshot when the ring has moved past it, a gap the ring could not hold).
type tail struct{ last []byte }

const tailKeep = 4096

func (t *tail) write(w io.Writer, ring []byte) {
	next := ring
	if len(t.last) > 0 {
		if i := bytes.LastIndex(ring, t.last); i >= 0 {
			next = ring[i+len(t.last):]
		} else {
			// The ring starts inside what was printed: the longest overlap of its
			// start with the printed end.
			for k := min(len(ring), len(t.last)); k > 0; k-- {
				if bytes.Equal(ring[:k], t.last[len(t.last)-k:]) {
					next = ring[k:]
					break
				}
			}
		}
	}
	if len(next) == 0 {
		return
	}
	_, _ = w.Write(next)
	t.last = append(t.last, next...)
	if len(t.last) > tailKeep {
		t.last = append([]byte(nil), t.last[len(t.last)-tailKeep:]...)
	}
}

// tty reports whether w is a terminal (progress lines go only there).
func tty(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
