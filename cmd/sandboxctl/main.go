// Command sandboxctl is the operator's view of the sandboxes on a host: what this
// host can run, which sandboxes are alive and whose they are, and the shared proxy
// daemon's runs, audit and usage. It works over the library's public API, like
// docker, ctr and nomad do over theirs.
//
//	sandboxctl doctor                                  what this host can run, with a fix per failing line
//	sandboxctl ps [--owner O] [--runtime R]            runs, sessions and pool slots, by owner and runtime
//	sandboxctl sweep --owner O [--older-than D] [--dry-run] [--run-id ID]   everything a dead host left
//	sandboxctl logs|exec|stop --owner O --runtime R ID [...]   long-running sessions (logs --follow)
//	sandboxctl proxyd runs|usage|audit [--follow] ID   the shared proxy daemon's admin socket
//
// Output is a table for people, or JSON with --json. Exit codes: 0 success;
// 1 the operation failed (doctor: a check failed); 2 bad usage; 3 not found;
// 4 a daemon is unavailable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentsandbox/sandbox/port"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitUnavailable = 4
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `sandboxctl: operate the sandboxes of this host

Usage:
  sandboxctl doctor [--json] [--docker-host H] [--containerd-address A] [--namespace NS]
  sandboxctl ps [--json] [--owner O] [--runtime docker|containerd|all]
  sandboxctl sweep --owner O [--older-than 10m] [--run-id ID] [--dry-run] [--runtime R] [--json]
                   [--session-dir D] [--pool-dir D] [--proxy-dir D] [--workspace-dir D]
  sandboxctl sweep --owner O --runtime nomad-node [--nomad-addr A] [...]
  sandboxctl logs --owner O --runtime R [--follow [--now] [--for D]] ID
  sandboxctl exec --owner O --runtime R [--timeout 1m] ID -- CMD [ARG...]
  sandboxctl stop --owner O --runtime R [--grace 10s] ID
  sandboxctl proxyd runs|usage [--json] [--admin-socket S]
  sandboxctl proxyd audit [--follow] [--json] [--admin-socket S] ID
  sandboxctl bridge [--dir D]

Commands:
  doctor   check what this host can run: Docker and containerd (reachable, versions),
           gVisor (runsc) registered, cgroup layout, the mount API pools need,
           pid_max headroom, open-file limit, nginx, OpenClaw. Each failing line
           says what to do.
  ps       list the library's sandboxes (runs, sessions, pool slots) and proxies,
           with owner, runtime, age and state.
  sweep    remove everything hosts of one owner left behind, older than a grace
           period (never another owner's): sandboxes, sessions and their directories,
           pool slots, run leases, proxy containers, the proxies' directories and
           sockets, and NewWorkspace's workspaces. --dry-run lists exactly what a
           sweep then removes. --runtime nomad-node sweeps this Nomad
           client machine's Docker: the owner's containers whose allocation Nomad
           (--nomad-addr, default $NOMAD_ADDR; token $NOMAD_TOKEN) no longer runs.
  logs     print what a session's output log holds (the last LogLimit bytes of each
           stream); --follow goes on with every byte as it comes until the session
           ends (--now: from now on). It reads the session's log as every reader
           does: it takes nothing from the host that started the session or from
           another reader, and says how many bytes came before what it could show.
  exec     run a command in a session, as its user with its lockdown; its output is
           the command's own, and the session's output is untouched (any number of
           hosts, logs followers and execs at once).
  stop     stop a session (SIGTERM, SIGKILL after --grace) and remove it.
  proxyd   the shared proxy daemon: registered runs, per-run usage, a run's audit.
  bridge   build the in-sandbox bridge into the cache sandbox.Open reads and print
           its path: at a released version, seeds the cache of hosts without Go.

Common flags:
  --json                 JSON instead of a table
  --docker-host H        Docker daemon (default $DOCKER_HOST or unix:///var/run/docker.sock)
  --containerd-address A containerd socket (default /run/containerd/containerd.sock)
  --namespace NS         containerd namespace (default agentsandbox)
  --session-dir D        sessions' host directory root (default the library's)

Exit codes: 0 success; 1 failed (doctor: a check failed); 2 usage; 3 not found;
4 a daemon is unavailable.
`

// run runs one command line and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmds := map[string]func(context.Context, []string, io.Writer, io.Writer) int{
		"doctor": cmdDoctor, "ps": cmdPs, "sweep": cmdSweep,
		"logs": cmdLogs, "exec": cmdExec, "stop": cmdStop, "proxyd": cmdProxyd, "bridge": cmdBridge,
	}
	f, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sandboxctl: unknown command %q (see sandboxctl --help)\n", args[0])
		return exitUsage
	}
	return f(ctx, args[1:], stdout, stderr)
}

// common are the flags most commands share.
type common struct {
	json              bool
	dockerHost        string
	containerdAddress string
	namespace         string
	owner             string
	runtime           string
	sessionDir        string
	poolDir           string // sweep's --pool-dir
}

func newFlags(name string, stderr io.Writer, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet("sandboxctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	fs.StringVar(&c.dockerHost, "docker-host", os.Getenv("DOCKER_HOST"), "Docker daemon `address` (default $DOCKER_HOST or the local socket)")
	fs.StringVar(&c.containerdAddress, "containerd-address", "/run/containerd/containerd.sock", "containerd `socket`")
	fs.StringVar(&c.namespace, "namespace", "agentsandbox", "containerd `namespace`")
	fs.StringVar(&c.owner, "owner", "", "owner label `value` (sweep, sessions: required)")
	fs.StringVar(&c.runtime, "runtime", "all", "`runtime`: docker, containerd or all")
	fs.StringVar(&c.sessionDir, "session-dir", "", "sessions' host directory `root` (default the library's)")
	return fs
}

// parseCode is the exit code of a flag parse error: 0 for -h/--help (the flag
// package printed the command's flags), 2 otherwise.
func parseCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// parse parses a command's args into fs and checks that it got from least to most
// positional arguments (most < 0: no upper bound). When it did not, ok is false
// and code is the exit code, after usage (if any) on stderr.
func parse(fs *flag.FlagSet, args []string, least, most int, stderr io.Writer, usage string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		return parseCode(err), false
	}
	if n := fs.NArg(); n < least || (most >= 0 && n > most) {
		if usage != "" {
			fmt.Fprintln(stderr, usage)
		}
		return exitUsage, false
	}
	return exitOK, true
}

// errCode maps an error to an exit code and prints it.
func errCode(stderr io.Writer, what string, err error) int {
	fmt.Fprintf(stderr, "sandboxctl: %s: %v\n", what, err)
	switch {
	case errors.Is(err, port.ErrNotFound):
		return exitNotFound
	case errors.Is(err, port.ErrUnavailable):
		return exitUnavailable
	case errors.Is(err, port.ErrInvalidSpec):
		return exitUsage
	}
	return exitFailed
}
