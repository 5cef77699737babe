// Package sandboxbridge is the in-sandbox side of the LLM socket bridge: it runs as a sandbox's
// entrypoint (usually PID 1), listens on a loopback TCP address (port.BridgeAddr) and
// forwards every connection to the per-run proxy's unix socket mounted at
// /llm-sock/llm.sock, then runs the agent's argv as its child.
//
// Agents inside a sandbox with no network at all can then use a plain
// OPENAI_API_BASE=http://localhost:8080. The bridge does not look at the bytes it
// forwards: the proxy on the other side of the socket does everything else.
//
// As PID 1 it also does what an init must: it forwards termination signals to the
// child, reaps orphaned zombies, and exits with the child's exit code (128+n when the
// child was killed by signal n). cmd/sandbox-bridge is the thin main around Run;
// the public package bridge builds it for the runners.
//
// The package uses only the standard library and golang.org/x/sys, so the binary stays
// small and static (CGO_ENABLED=0) and fits in a FROM scratch image.
package sandboxbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// Defaults: the addresses of the bridge's wire contract (api/bridgeapi).
const (
	DefaultListen = bridgeapi.LLMAddr
	DefaultSocket = bridgeapi.LLMSocketPath
)

// DefaultKillGrace is how long a child has to exit after SIGTERM when Run's context ends.
const DefaultKillGrace = 10 * time.Second

// Errors returned by Run, for errors.Is.
var (
	// ErrInvalidConfig reports a Config that Run refuses before doing anything.
	ErrInvalidConfig = errors.New("bridge: invalid config")
)

// forwardedSignals are passed on to the child. SIGKILL and SIGSTOP cannot be caught;
// SIGCHLD is the bridge's own business.
var forwardedSignals = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT,
}

// Config configures Run. Only Argv is required.
type Config struct {
	// Listen is the TCP address to listen on (default DefaultListen). It must be a
	// loopback IP literal with a port; port 0 picks a free port (see Ready).
	Listen string
	// Attest makes the bridge report an Attestation of its sandbox to the proxy on
	// Socket before it starts the child, so the report precedes every process of the
	// agent, with AttestKey (a proxy keeps the first that carries its run's key). A
	// failed report is logged, not fatal: the host's policy decides what a run
	// without one may do.
	Attest bool
	// AttestKey is the run's attestation key (bridgeapi.AttestKeyHeader), sent with
	// the attestation; empty sends none (a proxy that minted one then refuses the
	// report). The bridge gives it to no other process.
	AttestKey string
	// NoForward runs the child with no listener: for a sandbox without an LLM socket,
	// where the bridge is only the init (signals, reaping, OOM notice).
	NoForward bool
	// Socket is the unix socket connections are forwarded to (default DefaultSocket).
	// It is dialled per connection, so it need not exist when Run starts.
	Socket string
	// Egress, if set, is a second loopback address the bridge listens on, forwarding
	// to EgressSocket: the run's HTTP/HTTPS forward proxy (see egress.go).
	Egress string
	// EgressSocket is the egress proxy's socket (default DefaultEgressSocket).
	EgressSocket string
	// Argv is the child's command line, passed as is (never through a shell). argv[0]
	// is looked up in the bridge's PATH.
	Argv []string
	// Env is the child's environment; nil means the bridge's own.
	Env []string
	// Dir is the child's working directory; empty means the bridge's own.
	Dir string
	// Stdin, Stdout and Stderr are the child's; nil means the bridge's own. They are
	// files so the child gets them directly, with no copying goroutines.
	Stdin, Stdout, Stderr *os.File
	// OutputCap, when positive, passes the child's stdout and stderr through the
	// bridge (see spool.go) so the child never blocks on output: what the bridge's own
	// Stdout or Stderr cannot take yet (a long-running sandbox with no host reading)
	// is kept up to OutputCap bytes per stream, the oldest dropped beyond and counted
	// in a bridgeapi.DroppedNotice line on that stream.
	OutputCap int
	// OutputMarks, when positive (with OutputCap), marks each stream every that many
	// bytes of the child's output (see bridgeapi.OutputMark), so a host reading it from a log
	// the runtime rotates can count what it never received.
	OutputMarks int
	// LogStdout and LogStderr, when set (with OutputCap), get the child's stdout and
	// stderr as the bridge reads them, before anything can hold them up: a session's
	// output log (bridgeapi.LogWriter), which never waits for a reader. LogStderr also
	// gets the bridge's OOMNotice.
	LogStdout, LogStderr io.Writer
	// Reap makes the bridge reap every child process that ends, not only its own:
	// orphans are re-parented to PID 1 (or to a subreaper) and would stay zombies. It
	// is turned on automatically when the bridge is PID 1.
	Reap bool
	// Subreaper makes the bridge a child subreaper (Linux), so orphans of its
	// descendants are re-parented to it even when it is not PID 1. Implies Reap.
	Subreaper bool
	// KillGrace is how long the child has after SIGTERM when ctx ends before it gets
	// SIGKILL (default DefaultKillGrace).
	KillGrace time.Duration
	// Deadline, if set, ends the child as ctx ending does (SIGTERM, then SIGKILL after
	// KillGrace) when the wall clock reaches it: the sandbox's time limit holds even
	// when the host that should enforce it is gone. Run then returns bridgeapi.ErrDeadline.
	Deadline time.Time
	// DeadlineFile, if set with Deadline, is read when Deadline passes: a later time
	// there moves the deadline (see withDeadline; bridgeapi's deadline file format).
	DeadlineFile string
	// Expose lists loopback TCP ports reachable from outside through unix sockets
	// named PORT.sock in ExposeDir (see expose.go).
	Expose []int
	// ExposeDir is the directory of the Expose sockets (a host directory mounted in).
	ExposeDir string
	// Ready, if set, is called with the listening address once the listener is up and
	// before the child starts.
	Ready func(net.Addr)
	// Logger receives diagnostics (failed socket dials, signals); default: discard.
	Logger *slog.Logger
	// ExitNonce is the claim's (bridgeapi.Claim.ExitNonce). Run does not use it: the
	// stub around it ends its output with exit records (ExitReporter).
	ExitNonce string
	// Preloaded, if set, is a runtime started before the claim (StartPreload): Run
	// hands it Argv, Env, Dir and the deadline instead of starting Argv itself, and
	// forwards its output to Stdout and Stderr.
	Preloaded *Preloaded
}

// Run listens on cfg.Listen, starts forwarding connections to cfg.Socket, then runs
// cfg.Argv and waits for it. It returns the child's exit code (128+n if signal n killed
// it). When ctx ends, the child gets SIGTERM and, after KillGrace, SIGKILL; Run then
// returns the exit code and ctx's error.
//
// The listener is up before the child starts, and is closed (with every forwarded
// connection) when the child has exited. Errors before the child runs come with the exit
// code a shell would use: bridgeapi.ExitBridgeFailed with ErrInvalidConfig or a listen error,
// bridgeapi.ExitNotFound with bridgeapi.ErrCommandNotFound, bridgeapi.ExitCannotExec with bridgeapi.ErrCannotExec.
func Run(ctx context.Context, cfg Config) (int, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return bridgeapi.ExitBridgeFailed, err
	}
	log := cfg.Logger
	stopServices, err := startServices(cfg)
	if err != nil {
		return bridgeapi.ExitBridgeFailed, err
	}
	defer stopServices()

	var cmd *exec.Cmd
	if cfg.Preloaded == nil {
		cmd = exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
		if cmd.Err != nil {
			return execFailure(cfg.Argv[0], cmd.Err)
		}
		cmd.Env = cfg.Env
		cmd.Dir = cfg.Dir
		cmd.Stdin, cmd.Stdout, cmd.Stderr = cfg.Stdin, cfg.Stdout, cfg.Stderr
	}
	var spools []*spool
	if cfg.OutputCap > 0 && cmd != nil {
		// A preloaded runtime's output is forwarded by the bridge itself
		// (Preloaded.copy), uncapped here.
		so, wo, err := newSpool("stdout", cfg.Stdout, cfg.OutputCap, int64(cfg.OutputMarks), cfg.LogStdout)
		if err != nil {
			return bridgeapi.ExitBridgeFailed, err
		}
		se, we, err := newSpool("stderr", cfg.Stderr, cfg.OutputCap, int64(cfg.OutputMarks), cfg.LogStderr)
		if err != nil {
			_ = wo.Close()
			return bridgeapi.ExitBridgeFailed, err
		}
		spools = []*spool{so, se}
		cmd.Stdout, cmd.Stderr = wo, we
		// The child has its own copies once started (or never will): ours would keep
		// the spools from seeing the end of its output.
		defer wo.Close()
		defer we.Close()
	}
	flush := func() {
		if len(spools) == 0 {
			return
		}
		_ = cmd.Stdout.(*os.File).Close()
		_ = cmd.Stderr.(*os.File).Close()
		until := time.Now().Add(SpoolFlushGrace)
		for _, s := range spools {
			s.flush(until)
		}
	}

	// Subscribe before the child exists so that no signal (or SIGCHLD) is missed.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	var chld chan os.Signal
	if cfg.Reap {
		chld = make(chan os.Signal, 1)
		signal.Notify(chld, syscall.SIGCHLD)
		defer signal.Stop(chld)
	}

	if cfg.Attest && !cfg.NoForward {
		if err := postAttestation(ctx, cfg.Socket, cfg.AttestKey, Attest()); err != nil {
			// Debug: a proxy that takes no attestation (nginx) is not an error here.
			log.Debug("bridge: reporting the attestation failed", slog.Any("err", err))
		}
	}
	// The OOM-kill counter before the child exists: a rise by the time it has been
	// SIGKILLed means the kernel's OOM killer ended it (see bridgeapi.OOMNotice).
	oomBefore, oomKnown := oomKills()
	proc, code, err := startChild(cfg, cmd, len(spools) > 0, flush)
	if err != nil {
		return code, err
	}
	log.Debug("bridge: child started", slog.Int("pid", proc.Pid))
	exited := awaitChild(cfg, cmd, proc.Pid, chld, log)

	if !cfg.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = withDeadline(ctx, cfg.Deadline, cfg.DeadlineFile)
		defer cancel()
	}
	oomKilled := func() bool {
		n, ok := oomKills()
		return oomKnown && ok && n > oomBefore
	}
	return supervise(ctx, cfg, proc, exited, sigs, oomKilled, flush)
}

// startChild starts the child: it claims cfg's preloaded runtime (killed when the
// claim fails), or starts cmd. With spooled output the bridge's copies of the
// spools' write ends close once the child has its own. Errors come with the exit
// code Run returns for them.
func startChild(cfg Config, cmd *exec.Cmd, spooled bool, flush func()) (*os.Process, int, error) {
	if cfg.Preloaded != nil {
		p, code, err := cfg.Preloaded.claim(cfg)
		if err != nil {
			cfg.Preloaded.Kill()
			return nil, code, err
		}
		return p, 0, nil
	}
	if err := cmd.Start(); err != nil {
		flush()
		code, err := execFailure(cfg.Argv[0], err)
		return nil, code, err
	}
	if spooled {
		_ = cmd.Stdout.(*os.File).Close()
		_ = cmd.Stderr.(*os.File).Close()
	}
	return cmd.Process, 0, nil
}

// awaitChild delivers the exit code of the child pid on the returned channel, once.
func awaitChild(cfg Config, cmd *exec.Cmd, pid int, chld <-chan os.Signal, log *slog.Logger) <-chan int {
	exited := make(chan int, 1)
	switch {
	case cfg.Reap:
		// Reap everything; our child's status arrives through the same loop. cmd.Wait
		// must not be used then: it would race the loop for the child's status.
		go func() { exited <- reapUntil(pid, chld, log) }()
	case cfg.Preloaded != nil:
		go func() { exited <- cfg.Preloaded.wait() }()
	default:
		go func() {
			err := cmd.Wait()
			exited <- exitCode(cmd.ProcessState, err)
		}()
	}
	return exited
}

// startServices starts what the bridge serves beside the child, before it runs:
// the forwarding listener, the egress listener, the subreaper role and the exposed
// ports. stop ends them (in the reverse order); on error, what was started is
// stopped already.
func startServices(cfg Config) (stop func(), err error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stopAll()
		}
	}()
	if !cfg.NoForward {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("bridge: listen on %s: %w", cfg.Listen, err)
		}
		fw := newRelay(ln, cfg.Socket, cfg.Logger) // token.go: HTTP with the run token, or raw
		go fw.serve()
		stops = append(stops, fw.close)
		if cfg.Ready != nil {
			cfg.Ready(ln.Addr())
		}
	}
	stopEgress, err := startEgress(cfg)
	if err != nil {
		return nil, err
	}
	stops = append(stops, stopEgress)
	if cfg.Subreaper {
		if err := setSubreaper(); err != nil {
			return nil, fmt.Errorf("bridge: become a subreaper: %w", err)
		}
	}
	closeExposed, err := exposeAll(cfg, cfg.Logger)
	if err != nil {
		return nil, err
	}
	stops = append(stops, closeExposed)
	return stopAll, nil
}

// supervise waits for the child's exit code (from exited), forwarding signals to
// it; when ctx ends, the child gets SIGTERM and, after KillGrace, SIGKILL. At the
// exit, flush passes on what the output spools hold; an exit by SIGKILL that
// oomKilled confirms is reported on stderr (bridgeapi.OOMNotice).
func supervise(ctx context.Context, cfg Config, proc *os.Process, exited <-chan int, sigs <-chan os.Signal, oomKilled func() bool, flush func()) (int, error) {
	log := cfg.Logger
	var (
		ctxDone <-chan struct{} = ctx.Done()
		kill    <-chan time.Time
	)
	for {
		select {
		case code := <-exited:
			log.Debug("bridge: child exited", slog.Int("code", code))
			if cfg.Preloaded != nil {
				cfg.Preloaded.drain()
			}
			flush()
			if code == 128+int(syscall.SIGKILL) && oomKilled() {
				_, _ = io.WriteString(cfg.Stderr, bridgeapi.OOMNotice)
				if cfg.LogStderr != nil {
					_, _ = io.WriteString(cfg.LogStderr, bridgeapi.OOMNotice)
				}
			}
			if ctx.Err() != nil {
				return code, context.Cause(ctx)
			}
			return code, nil
		case s := <-sigs:
			log.Debug("bridge: forwarding signal", slog.String("signal", s.String()))
			_ = proc.Signal(s)
		case <-ctxDone:
			ctxDone = nil
			_ = proc.Signal(syscall.SIGTERM)
			t := time.NewTimer(cfg.KillGrace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			_ = proc.Kill()
		}
	}
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket
	}
	if cfg.Stdin == nil {
		cfg.Stdin = os.Stdin
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if os.Getpid() == 1 || cfg.Subreaper {
		cfg.Reap = true
	}
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		return cfg, fmt.Errorf("%w: no command given", ErrInvalidConfig)
	}
	if err := checkLoopback(cfg.Listen); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// checkLoopback accepts only a loopback IP literal with a port. Host names are refused:
// resolving "localhost" depends on files the agent might control.
func checkLoopback(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("%w: listen address %q is not an IP:port (%v)", ErrInvalidConfig, addr, err)
	}
	if !ap.Addr().IsLoopback() {
		return fmt.Errorf("%w: listen address %q is not loopback; the bridge must never be reachable from outside the sandbox", ErrInvalidConfig, addr)
	}
	return nil
}

// execFailure maps a failure to start argv[0] to the shell's exit codes.
func execFailure(name string, err error) (int, error) {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return bridgeapi.ExitNotFound, fmt.Errorf("%w: %s: %v", bridgeapi.ErrCommandNotFound, name, err)
	default:
		return bridgeapi.ExitCannotExec, fmt.Errorf("%w: %s: %v", bridgeapi.ErrCannotExec, name, err)
	}
}

// exitCode turns the end of a process into a shell-style exit code.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return bridgeapi.ExitBridgeFailed
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		return waitStatusCode(ws)
	}
	return ps.ExitCode()
}

func waitStatusCode(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	default:
		return bridgeapi.ExitBridgeFailed
	}
}
