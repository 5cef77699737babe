// Command sandbox-bridge is a sandbox's entrypoint: it forwards a loopback TCP address
// to the per-run LLM proxy's unix socket and runs the agent as its child.
//
//	sandbox-bridge [-listen 127.0.0.1:8080] [-socket /llm-sock/llm.sock] [-no-forward] [-attest] [-deadline unix-ms] [-grace d] [-subreaper] [-v] -- argv...
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
	"time"

	"github.com/agentsandbox/sandbox/internal/bridge"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandbox-bridge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", bridge.DefaultListen, "loopback `address` to listen on")
	socket := fs.String("socket", bridge.DefaultSocket, "unix `socket` to forward connections to")
	attest := fs.Bool("attest", false, "report the sandbox's isolation to the proxy on -socket before starting the command")
	noForward := fs.Bool("no-forward", false, "do not listen: run the command as its init only (no LLM socket)")
	deadline := fs.Int64("deadline", 0, "end the command (TERM, then KILL after -grace) at this `unix time in milliseconds`")
	grace := fs.Duration("grace", bridge.DefaultKillGrace, "how long the command has between TERM and KILL")
	subreaper := fs.Bool("subreaper", false, "reap orphaned descendants even when not PID 1 (Linux)")
	verbose := fs.Bool("v", false, "log diagnostics to stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sandbox-bridge [flags] -- command [args...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return bridge.ExitBridgeFailed
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	code, err := bridge.Run(context.Background(), bridge.Config{
		Listen:    *listen,
		Socket:    *socket,
		NoForward: *noForward,
		Attest:    *attest,
		Deadline:  deadlineTime(*deadline),
		KillGrace: *grace,
		Argv:      fs.Args(),
		Subreaper: *subreaper,
		Logger:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	})
	switch {
	case errors.Is(err, bridge.ErrDeadline):
		fmt.Fprintf(stderr, "sandbox-bridge: %v; the command was stopped\n", err)
	case errors.Is(err, bridge.ErrCommandNotFound), errors.Is(err, bridge.ErrCannotExec):
		fmt.Fprintf(stderr, "%s%v\n", bridge.ExecFailedPrefix, err)
	case err != nil:
		fmt.Fprintf(stderr, "sandbox-bridge: %v\n", err)
	}
	return code
}

func deadlineTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
