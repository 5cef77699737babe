package main

import (
	"context"
	"encoding/json"
	"errors"
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
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sandboxctl exec --owner O --runtime R [--timeout 1m] [-w DIR] ID [--] CMD [ARG...]")
		fmt.Fprintln(stderr, "Runs CMD in the session as its user, with its lockdown, and prints the command's own output;")
		fmt.Fprintln(stderr, "the session's output (its log) is untouched: the host that started it and any logs --follow")
		fmt.Fprintln(stderr, "see every byte. Exits with the command's exit code.")
		fs.PrintDefaults()
	}
	timeout := fs.Duration("timeout", time.Minute, "bound on the command")
	workdir := fs.String("w", "", "working `directory` in the sandbox (default the workspace)")
	if code, ok := parse(fs, args, 2, -1, stderr, "usage: sandboxctl exec --owner O --runtime R ID [--] CMD [ARG...]"); !ok {
		return code
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
	if code, ok := parse(fs, args, 1, 1, stderr, "usage: sandboxctl stop --owner O --runtime R [--grace D] ID"); !ok {
		return code
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
	follow := fs.Bool("follow", false, "keep printing the output as it comes, until the session ends or Ctrl-C")
	now := fs.Bool("now", false, "with --follow: only output from now on (not what the log holds)")
	wait := fs.Duration("for", 0, "with --follow: stop after this long (0: until the session ends)")
	if code, ok := parse(fs, args, 1, 1, stderr, "usage: sandboxctl logs --owner O --runtime R [--follow [--now] [--for D]] ID"); !ok {
		return code
	}
	s, done, err := attach(ctx, c, fs.Arg(0))
	if err != nil {
		return errCode(stderr, "logs", err)
	}
	defer done()
	defer s.Detach()
	lf, ok := s.(port.LogFollower)
	if !ok {
		return errCode(stderr, "logs", fmt.Errorf("%w: this runtime's sessions have no output log", port.ErrUnsupported))
	}
	if !*follow {
		snap, err := lf.LogSnapshot()
		if err != nil {
			return errCode(stderr, "logs", err)
		}
		_, _ = stdout.Write(snap.Stdout)
		_, _ = stderr.Write(snap.Stderr)
		noteDropped(stderr, snap.Start)
		return exitOK
	}
	if *wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *wait)
		defer cancel()
	}
	r, err := lf.Follow(ctx, port.FollowOptions{Now: *now})
	if err != nil {
		return errCode(stderr, "logs", err)
	}
	defer r.Close()
	// On stderr, so stdout is the session's output only.
	fmt.Fprintf(stderr, "sandboxctl: following session %s (run %s)\n", fs.Arg(0), s.RunID())
	var dropped port.LogPosition
	defer func() { noteDropped(stderr, dropped) }()
	for {
		ch, err := r.Next(ctx)
		switch {
		case errors.Is(err, io.EOF), ctx.Err() != nil:
			return exitOK
		case err != nil:
			return errCode(stderr, "logs", err)
		}
		w := stdout
		if ch.Stream == port.LogStderr {
			w, dropped.Stderr = stderr, dropped.Stderr+ch.Dropped
		} else {
			dropped.Stdout += ch.Dropped
		}
		_, _ = w.Write(ch.Data)
	}
}

// noteDropped says on w how many bytes of each stream were not printed because the
// session's log no longer held them.
func noteDropped(w io.Writer, d port.LogPosition) {
	if d.Stdout > 0 || d.Stderr > 0 {
		fmt.Fprintf(w, "sandboxctl: %d bytes of stdout and %d of stderr came before what the session's log held and are not shown\n", d.Stdout, d.Stderr)
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
