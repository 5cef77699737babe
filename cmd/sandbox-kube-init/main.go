// Command sandbox-kube-init is the Kubernetes runner's helper inside a run's Pod
// (adapters/kubernetes mounts it read-only from the node). It has two modes:
//
//	sandbox-kube-init netdown
//	sandbox-kube-init run [-keep NAME,...] [-nofile N] [-max N] [-env K=V]... [-dir D] [-pid] -- argv...
//	sandbox-kube-init kill -TERM|-KILL PID
//
// netdown runs as the Pod's init container, the only step holding CAP_NET_ADMIN: it
// deletes every network interface of the Pod's network namespace but lo (a veth's peer
// on the node goes with it), then checks that only lo and no route through anything
// else remain, and fails otherwise, so the agent container never starts with a
// network. It works whatever CNI plugin gave the Pod its interface.
//
// run is the agent container's first process. It
//   - keeps only the variables named in -keep plus PATH, HOME and HOSTNAME (the
//     kubelet adds KUBERNETES_SERVICE_* and friends to every container);
//   - sets the -env variables (a session's exec: the exec subresource has no
//     environment of its own) and runs argv in -dir when given;
//   - with -pid, first writes its own process ID as a frame "p <pid>\n" (a session's
//     exec: the host ends an abandoned exec with the kill mode, as the exec
//     subresource cannot signal);
//   - lowers RLIMIT_NOFILE to -nofile, soft and hard (the Pod spec has no field for it);
//   - marks itself non-dumpable, first, so the agent (the same uid) cannot open its
//     descriptors through /proc and write to the container's own stdout, nor read
//     its environment (the bridge's attestation key);
//   - runs argv with stdout and stderr on pipes and writes both, in order, to its own
//     stdout as frames the runner decodes from the Pod's log: "o <base64>\n" and
//     "e <base64>\n", at most -max bytes of each stream, then "t <out> <err>\n" saying
//     whether either was cut, and exits with argv's exit code (128+signal when killed).
//
// kill sends SIGTERM or SIGKILL to PID (as the container's user: only its own
// processes).
//
// The Kubernetes log API merges a container's stdout and stderr (splitting them is an
// alpha feature gate in 1.36), so the frames are how the streams stay separate on any
// cluster.
package main

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/sandbox/internal/initenv"
	"github.com/agentsandbox/sandbox/internal/netdown"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "netdown":
		if err := netdown.Here("/proc/net"); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-kube-init netdown:", err)
			os.Exit(1)
		}
	case "run":
		os.Exit(run(os.Args[2:]))
	case "kill":
		os.Exit(kill(os.Args[2:]))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: sandbox-kube-init netdown | run [-keep NAMES] [-nofile N] [-max N] -- argv...")
	os.Exit(2)
}

func run(args []string) int {
	// First: the agent (the same uid) can then neither read this process's
	// environment (a run's attestation key for its bridge) through /proc nor open
	// its descriptors (the container's own stdout).
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	keep := fs.String("keep", "", "comma-separated `names` of the variables to keep (besides PATH, HOME, HOSTNAME)")
	nofile := fs.Uint64("nofile", 0, "RLIMIT_NOFILE, soft and hard (0 leaves it)")
	maxOut := fs.Int("max", 2<<20, "bytes of each stream to forward")
	var extra []string
	fs.Func("env", "`K=V` to set for argv (repeatable)", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("-env %q is not K=V", v)
		}
		extra = append(extra, v)
		return nil
	})
	dir := fs.String("dir", "", "working `directory` of argv")
	pidFrame := fs.Bool("pid", false, "write a frame with the init's process ID first")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "sandbox-kube-init run: an argv is needed after --")
		return 2
	}
	argv := fs.Args()
	if *pidFrame {
		fmt.Fprintf(os.Stdout, "p %d\n", os.Getpid())
	}
	if *nofile > 0 {
		lim := &syscall.Rlimit{Cur: *nofile, Max: *nofile}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, lim); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-kube-init: setting RLIMIT_NOFILE:", err)
			return 126
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(initenv.Filter(*keep), extra...)
	cmd.Dir = *dir
	outR, outW, err := os.Pipe()
	if err != nil {
		return 126
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return 126
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	// Signals for the container (SIGTERM at deletion) go to the command.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stdout, "e %s\n", base64.StdEncoding.EncodeToString([]byte("sandbox-kube-init: cannot start the command: "+err.Error()+"\n")))
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
			return 127
		}
		return 126
	}
	outW.Close()
	errW.Close()
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	fw := &framer{w: os.Stdout}
	var wg sync.WaitGroup
	var truncOut, truncErr bool
	wg.Add(2)
	go func() { defer wg.Done(); truncOut = fw.copy('o', outR, *maxOut) }()
	go func() { defer wg.Done(); truncErr = fw.copy('e', errR, *maxOut) }()
	wg.Wait()
	err = cmd.Wait()
	fmt.Fprintf(os.Stdout, "t %t %t\n", truncOut, truncErr)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		} else {
			code = ee.ExitCode()
		}
	} else if err != nil {
		code = 126
	}
	return code
}

func kill(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sandbox-kube-init kill -TERM|-KILL PID")
		return 2
	}
	sig := map[string]syscall.Signal{"-TERM": syscall.SIGTERM, "-KILL": syscall.SIGKILL}[args[0]]
	pid, err := strconv.Atoi(args[1])
	if sig == 0 || err != nil || pid <= 1 {
		fmt.Fprintln(os.Stderr, "usage: sandbox-kube-init kill -TERM|-KILL PID (PID > 1)")
		return 2
	}
	if err := syscall.Kill(pid, sig); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-kube-init kill:", err)
		return 1
	}
	return 0
}

// framer writes whole frames, one at a time, to the container's stdout.
type framer struct {
	mu sync.Mutex
	w  io.Writer
}

// copy forwards r as frames of kind until EOF, at most limit bytes; the rest is read
// and dropped (so the command never blocks on a full pipe). It reports whether
// anything was dropped.
func (f *framer) copy(kind byte, r io.Reader, limit int) (truncated bool) {
	buf := make([]byte, 32<<10)
	sent := 0
	for {
		n, err := r.Read(buf)
		if n > 0 {
			keep := min(n, limit-sent)
			if keep < n {
				truncated = true
			}
			if keep > 0 {
				line := make([]byte, 0, 3+base64.StdEncoding.EncodedLen(keep))
				line = append(line, kind, ' ')
				line = base64.StdEncoding.AppendEncode(line, buf[:keep])
				line = append(line, '\n')
				f.mu.Lock()
				_, _ = f.w.Write(line)
				f.mu.Unlock()
				sent += keep
			}
		}
		if err != nil {
			return truncated
		}
	}
}
