// Command sandbox-bridge is a sandbox's entrypoint: it forwards a loopback TCP address
// to the per-run LLM proxy's unix socket and runs the agent as its child.
//
//	sandbox-bridge [-listen 127.0.0.1:8080] [-socket /llm-sock/llm.sock] [-egress 127.0.0.1:3128] [-no-forward] [-attest] [-deadline unix-ms] [-grace d] [-subreaper] [-v] -- argv...
//	sandbox-bridge -claim [-listen ...] [-socket ...] [-subreaper] [-v]
//
// With -claim it is the stub of a pre-created sandbox in a warm pool: it reads the run
// (argv, environment, working directory, forwarding, deadline; see bridgeapi.Claim) as one
// line from its stdin, closes it, and runs the command with /dev/null as stdin, so the
// command never sees the channel the run came through. When the claim carries an exit
// nonce, the command's output passes through the stub, which ends both streams with an
// exit record (bridgeapi.ExitRecord) once they are whole.
//
// With -output-cap N the command's output passes through the bridge, so the command
// never blocks on it: what no one reads yet (a long-running sandbox whose host is
// away) is kept up to N bytes per stream, and what is dropped beyond is counted in a
// line on that stream. With -log-dir DIR too (a session) the output, and the bridge's
// notices on stderr, also go to the session's output log in DIR as they are read (see
// api/bridgeapi), which any number of host readers follow.
//
// With -expose-dir DIR -expose PORT (repeatable) it also listens on DIR/PORT.sock and
// forwards each connection to 127.0.0.1:PORT: how a long-running sandbox's host reaches
// a port its process listens on, through a directory mounted from the host.
//
// It exits with the child's exit code (128+n if signal n killed it), 127 if argv[0] is
// not found, 126 if it cannot be executed and 125 if the bridge itself cannot start.
// Build it static (CGO_ENABLED=0 go build -trimpath ./cmd/sandbox-bridge), or let
// bridge.Build do it and cache the result.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/cmd/sandbox-bridge/internal/sandboxbridge"
)

// stdin is the claim channel with -claim, stdout where a -preload stub reports its
// runtime's readiness before the claim (variables for tests).
var (
	stdin            = os.Stdin
	stdout io.Writer = os.Stdout
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// options are the bridge's flags (api/bridgeapi names them for the hosts that write
// its command lines).
type options struct {
	listen, socket, egressAddr, egressSocket, exposeDir, deadlineFile string
	attest, noForward, subreaper, verbose, claim, preload             bool
	deadline                                                          int64
	grace, preloadTimeout                                             time.Duration
	expose                                                            exposeFlag
	outputMarks, outputCap                                            int
	logDir                                                            string
}

// newFlagSet defines the bridge's flags on o.
func newFlagSet(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sandbox-bridge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, bridgeapi.FlagListen, sandboxbridge.DefaultListen, "loopback `address` to listen on")
	fs.StringVar(&o.socket, bridgeapi.FlagSocket, sandboxbridge.DefaultSocket, "unix `socket` to forward connections to")
	fs.BoolVar(&o.attest, bridgeapi.FlagAttest, false, "report the sandbox's isolation to the proxy on -socket before starting the command")
	fs.BoolVar(&o.noForward, bridgeapi.FlagNoForward, false, "do not listen: run the command as its init only (no LLM socket)")
	fs.Int64Var(&o.deadline, bridgeapi.FlagDeadline, 0, "end the command (TERM, then KILL after -grace) at this `unix time in milliseconds`")
	fs.StringVar(&o.deadlineFile, bridgeapi.FlagDeadlineFile, "", "with -deadline: when it passes, read this `file` (Unix milliseconds, written by the host) and wait until that time plus the bridge's slack if it is later")
	fs.DurationVar(&o.grace, bridgeapi.FlagGrace, sandboxbridge.DefaultKillGrace, "how long the command has between TERM and KILL")
	fs.BoolVar(&o.subreaper, bridgeapi.FlagSubreaper, false, "reap orphaned descendants even when not PID 1 (Linux)")
	fs.BoolVar(&o.verbose, bridgeapi.FlagVerbose, false, "log diagnostics to stderr")
	fs.StringVar(&o.egressAddr, bridgeapi.FlagEgress, "", "also listen on this loopback `address` as the run's HTTP/HTTPS forward proxy, forwarding to -egress-socket")
	fs.StringVar(&o.egressSocket, bridgeapi.FlagEgressSocket, sandboxbridge.DefaultEgressSocket, "the egress proxy's unix `socket`")
	fs.BoolVar(&o.claim, bridgeapi.FlagClaim, false, "read the run from stdin (a warm pool's stub) instead of the command line")
	fs.BoolVar(&o.preload, bridgeapi.FlagPreload, false, "with -claim: start the command line as a preloaded runtime before the claim and hand it the run (api/bridgeapi's preload protocol)")
	fs.DurationVar(&o.preloadTimeout, bridgeapi.FlagPreloadTimeout, bridgeapi.DefaultPreloadTimeout, "how long a preloaded runtime may take to be ready")
	fs.Var(&o.expose, bridgeapi.FlagExpose, "expose this loopback TCP `port` as PORT.sock in -expose-dir (repeatable)")
	fs.StringVar(&o.exposeDir, bridgeapi.FlagExposeDir, "", "`directory` of the -expose sockets")
	fs.IntVar(&o.outputMarks, bridgeapi.FlagOutputMarks, 0, "with -output-cap: mark each stream every this many `bytes` of the command's output with its offset (a host reading a rotated log counts what it lost)")
	fs.StringVar(&o.logDir, bridgeapi.FlagLogDir, "", "with -output-cap: also write the command's stdout and stderr, and the bridge's notices, to the session's output log in this `directory` (api/bridgeapi's ring files, which the host made)")
	fs.IntVar(&o.outputCap, bridgeapi.FlagOutputCap, 0, "pass the command's output through the bridge, keeping up to this many `bytes` per stream that no one reads yet (the command never blocks on output)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sandbox-bridge [flags] -- command [args...]")
		fs.PrintDefaults()
	}
	return fs
}

// logger is the bridge's logger on w: warnings, or everything with -v.
func (o *options) logger(w io.Writer) *slog.Logger {
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

func run(args []string, stderr io.Writer) (code int) {
	// Before anything else: the attestation key leaves the environment every child
	// inherits, and the process that holds it becomes unreadable to them.
	key, err := takeAttestKey()
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-bridge: %v\n", err)
		return bridgeapi.ExitBridgeFailed
	}
	var o options
	fs := newFlagSet(&o, stderr)
	if err := fs.Parse(args); err != nil {
		return bridgeapi.ExitBridgeFailed
	}
	cfg := sandboxbridge.Config{
		NoForward:    o.noForward,
		Attest:       o.attest,
		AttestKey:    key,
		Deadline:     deadlineTime(o.deadline),
		DeadlineFile: o.deadlineFile,
		KillGrace:    o.grace,
		Argv:         fs.Args(),
	}
	if o.claim {
		c, rep, ok := claimRun(&o, fs.Args(), stderr)
		if !ok {
			return bridgeapi.ExitBridgeFailed
		}
		cfg = c
		defer cfg.Stdin.Close()
		if rep != nil {
			// Our messages about the run pass through the reporter too, so that the
			// exit record ends each stream once it is whole (deferred: after the
			// last message).
			stderr = rep.Stderr()
			defer func() { rep.Finish(code, c.Preloaded) }()
		}
	} else if o.preload {
		fmt.Fprintln(stderr, "sandbox-bridge: -preload needs -claim")
		return bridgeapi.ExitBridgeFailed
	}
	return runCommand(cfg, &o, stderr)
}

// claimRun is a warm pool's stub up to its claim: it makes itself undumpable, starts
// the preloaded runtime (-preload, with argv), and reads the run from the claim
// channel. It returns the run's configuration and, when the claim carries an exit
// nonce, the reporter the command's output passes through; it says on stderr why it
// cannot (ok false).
func claimRun(o *options, argv []string, stderr io.Writer) (cfg sandboxbridge.Config, rep *sandboxbridge.ExitReporter, ok bool) {
	// Before the claim arrives or any process of the sandbox's starts: no process of
	// the agent's can read the claim or its exit nonce out of us.
	if err := sandboxbridge.SetUndumpable(); err != nil {
		fmt.Fprintf(stderr, "sandbox-bridge: %v\n", err)
		return cfg, nil, false
	}
	var pre *sandboxbridge.Preloaded
	if o.preload {
		var err error
		if pre, err = startPreload(argv, o.preloadTimeout, stdout, o.logger(stderr)); err != nil {
			fmt.Fprintf(stderr, "sandbox-bridge: %v\n", err)
			return cfg, nil, false
		}
	}
	cfg, err := readClaimWhile(stdin, pre)
	if err != nil {
		if errors.Is(err, sandboxbridge.ErrPreloadFailed) {
			fmt.Fprintf(stderr, "%s%v\n", bridgeapi.PreloadGone, err)
		} else {
			fmt.Fprintf(stderr, "sandbox-bridge: %v\n", err)
		}
		return cfg, nil, false
	}
	cfg.Preloaded = pre
	if cfg.ExitNonce == "" {
		return cfg, nil, true
	}
	// The command's output passes through us so that we can end each stream with
	// the exit record once it is whole.
	if rep, err = sandboxbridge.NewExitReporter(cfg.ExitNonce, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "sandbox-bridge: %v\n", err)
		cfg.Stdin.Close()
		return cfg, nil, false
	}
	cfg.Stdout, cfg.Stderr = rep.Stdout(), rep.Stderr()
	return cfg, rep, true
}

// runCommand runs cfg's command with the listeners, logging and output handling of
// the flags, and says on stderr why the command did not run or was stopped.
func runCommand(cfg sandboxbridge.Config, o *options, stderr io.Writer) int {
	cfg.Listen, cfg.Socket, cfg.Subreaper = o.listen, o.socket, o.subreaper
	if o.egressAddr != "" {
		cfg.Egress = o.egressAddr
	}
	cfg.EgressSocket = o.egressSocket
	cfg.Logger = o.logger(stderr)
	cfg.Expose, cfg.ExposeDir = o.expose, o.exposeDir
	cfg.OutputCap, cfg.OutputMarks = o.outputCap, o.outputMarks
	if o.logDir != "" {
		if o.outputCap <= 0 {
			fmt.Fprintln(stderr, "sandbox-bridge: -log-dir needs -output-cap")
			return bridgeapi.ExitBridgeFailed
		}
		logs, err := openLogs(o.logDir)
		if err != nil {
			fmt.Fprintf(stderr, "sandbox-bridge: session log: %v\n", err)
			return bridgeapi.ExitBridgeFailed
		}
		defer logs[0].Close()
		defer logs[1].Close()
		cfg.LogStdout, cfg.LogStderr = logs[0], logs[1]
		// Our own messages about the run are the session's stderr too.
		stderr = io.MultiWriter(logs[1], stderr)
	}
	code, err := sandboxbridge.Run(context.Background(), cfg)
	switch {
	case errors.Is(err, bridgeapi.ErrDeadline):
		fmt.Fprintf(stderr, "sandbox-bridge: %v; the command was stopped\n", err)
	case errors.Is(err, sandboxbridge.ErrPreloadFailed):
		// Nothing of the run ran: the host may run it cold elsewhere.
		fmt.Fprintf(stderr, "%s%v\n", bridgeapi.PreloadGone, err)
	case errors.Is(err, bridgeapi.ErrCommandNotFound), errors.Is(err, bridgeapi.ErrCannotExec):
		fmt.Fprintf(stderr, "%s%v\n", bridgeapi.ExecFailedPrefix, err)
	case err != nil:
		fmt.Fprintf(stderr, "sandbox-bridge: %v\n", err)
	}
	return code
}

// takeAttestKey removes the run's attestation key (bridgeapi.AttestKeyEnv) from the
// bridge's environment, so that no child inherits it, and returns it ("" when the
// variable is empty or not a key: then the bridge has none). A bridge that had one
// makes itself undumpable first: the environment it started with stays in its
// /proc/PID/environ, which the sandbox's user can then no longer read (nor its
// memory, nor can it ptrace it).
func takeAttestKey() (string, error) {
	key, ok := os.LookupEnv(bridgeapi.AttestKeyEnv)
	if !ok {
		return "", nil
	}
	if key != "" {
		if err := sandboxbridge.SetUndumpable(); err != nil {
			return "", err
		}
	}
	if err := os.Unsetenv(bridgeapi.AttestKeyEnv); err != nil {
		return "", err
	}
	if !bridgeapi.ValidAttestKey(key) {
		return "", nil
	}
	return key, nil
}

// openLogs opens the session's output log files in dir (stdout, stderr).
func openLogs(dir string) ([2]*bridgeapi.LogWriter, error) {
	var ws [2]*bridgeapi.LogWriter
	for i, name := range []string{bridgeapi.LogStdout, bridgeapi.LogStderr} {
		w, err := bridgeapi.OpenLogWriter(filepath.Join(dir, name))
		if err != nil {
			if i == 1 {
				ws[0].Close()
			}
			return ws, err
		}
		ws[i] = w
	}
	return ws, nil
}

func deadlineTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// readClaim reads the run from the claim channel (stdin), closes it, and
// returns its configuration with /dev/null as the command's stdin. argv[0] is looked
// up in the claim's PATH, as it would be in a sandbox started with its run.
func readClaim(in *os.File) (sandboxbridge.Config, error) {
	c, err := bridgeapi.ReadClaim(in)
	_ = in.Close()
	if err != nil {
		return sandboxbridge.Config{}, err
	}
	if p, ok := c.Path(); ok {
		if err := os.Setenv("PATH", p); err != nil {
			return sandboxbridge.Config{}, err
		}
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return sandboxbridge.Config{}, err
	}
	cfg := sandboxbridge.ClaimConfig(c)
	cfg.Stdin = null
	return cfg, nil
}

// startPreload starts the preloaded runtime and reports the outcome on out, one
// bridgeapi.PreloadStatus line, with the sandbox's attestation once it is ready.
func startPreload(argv []string, timeout time.Duration, out io.Writer, log *slog.Logger) (*sandboxbridge.Preloaded, error) {
	t0 := time.Now()
	p, err := sandboxbridge.StartPreload(context.Background(), argv, timeout, log)
	if err != nil {
		_ = bridgeapi.WriteLine(out, bridgeapi.PreloadStatus{Preload: bridgeapi.PreloadStatusFailed, Reason: err.Error()})
		return nil, err
	}
	att := sandboxbridge.Attest()
	st := bridgeapi.PreloadStatus{Preload: bridgeapi.PreloadStatusReady, Attestation: &att, BootMS: time.Since(t0).Milliseconds()}
	if err := bridgeapi.WriteLine(out, st); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// readClaimWhile reads the claim, unless the preloaded runtime (if any) fails first:
// then the stub exits and its pool drops it.
func readClaimWhile(in *os.File, pre *sandboxbridge.Preloaded) (sandboxbridge.Config, error) {
	if pre == nil {
		return readClaim(in)
	}
	type result struct {
		cfg sandboxbridge.Config
		err error
	}
	got := make(chan result, 1)
	go func() {
		cfg, err := readClaim(in)
		got <- result{cfg, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			pre.Kill()
		}
		return r.cfg, r.err
	case <-pre.Failed():
		pre.Kill()
		return sandboxbridge.Config{}, fmt.Errorf("%w: %s", sandboxbridge.ErrPreloadFailed, pre.Reason())
	}
}
