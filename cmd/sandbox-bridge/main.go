// Command sandbox-bridge is a sandbox's entrypoint: it forwards a loopback TCP address
// to the per-run LLM proxy's unix socket and runs the agent as its child.
//
//	sandbox-bridge [-listen 127.0.0.1:8080] [-socket /llm-sock/llm.sock] [-subreaper] [-v] -- argv...
//
// It exits with the child's exit code (128+n if signal n killed it), 127 if argv[0] is
// not found, 126 if it cannot be executed and 125 if the bridge itself cannot start.
// Build it static (CGO_ENABLED=0 go build -trimpath ./cmd/sandbox-bridge), or let
// bridge.Build do it and cache the result.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

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
		Argv:      fs.Args(),
		Subreaper: *subreaper,
		Logger:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-bridge: %v\n", err)
	}
	return code
}
