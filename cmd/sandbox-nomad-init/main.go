// Command sandbox-nomad-init is the first process of a sandbox on Nomad. It gives the
// sandbox the environment its run asked for, waits for the run's LLM proxy, and runs
// its argv (normally the sandbox bridge) with stdout and stderr capped and passed on to
// the task's own streams, which Nomad stores and the host reads through its log API.
//
//	sandbox-nomad-init [-unwritable DIR,...] [-keep NAME,...] [-b64 NAME,...] [-wait SOCKET] [-capture -max N [-flushed OUT,ERR]] -- argv...
//	sandbox-nomad-init -unpack TAR -into DIR
//
// With -unpack it unpacks a workspace (regular files and directories; nothing outside
// DIR, no links) into DIR, which it creates; with no argv it then exits, with argv it
// runs it. With -export DIR (and -capture), once the command has ended the init kills
// every other process of the container and writes DIR's regular files and directories
// as a tar archive on its stderr, in frames of their own (lines starting with '!', a
// character outside base64's alphabet, ended by "!end", or "!over REASON" past
// -export-max bytes of archive or -export-files files): the copied workspace, a
// capped tmpfs, goes back to the host through the task's bounded log files.
//
// Why each part exists:
//
//   - Nomad adds its own variables (NOMAD_ALLOC_ID, NOMAD_TASK_DIR, ...) to every
//     task's environment and has no setting to leave them out; the command's
//     environment is made of the names in -keep plus PATH, HOME and HOSTNAME only.
//   - Nomad binds the allocation's shared directory and the task's local/ and secrets/
//     directories (the node's disk, no bound) into every task; the runner binds them
//     where the runtime masks them, and -unwritable refuses to start argv if any of
//     them is writable there all the same.
//   - Nomad starts the sandbox task once the proxy's sidecar task runs, not once it
//     listens; -wait dials the unix socket until it accepts a connection (or
//     -wait-timeout passes).
//   - With -capture, at most -max+1 bytes of each of the command's streams reach the
//     task's stdout and stderr (the host keeps -max and learns whether there was
//     more); the rest is read and dropped so the command never blocks. What Nomad
//     stores of the task's output is then bounded whatever the command writes.
//   - Docker's log collection holds a line back until its newline (or 16 KiB), and
//     its json-file driver replaces bytes that are not UTF-8. With -capture the bytes
//     travel as frames: lines of base64 of at most 8 KiB each, sent once the command
//     has paused for 10 ms or 8 KiB are waiting, so they arrive while the command
//     runs, whole, whatever they are. The host decodes them (a line that is no frame
//     is kept as it is).
//   - Nomad's docker log collection stops when the container exits, sometimes before
//     it has read the container's last output. -flushed names the files (mounted
//     read-only) where Nomad stores the task's stdout and stderr: once the command has
//     ended, the init waits (at most -flush-timeout) until they hold all it wrote, so
//     nothing is lost when the container ends.
//
// The init makes itself non-dumpable, so the command (the same user) can neither
// trace it nor reopen its streams through /proc/1/fd and write past the cap.
//
// Without -capture it replaces itself with argv (execve). With it, it stays as the
// command's parent: it answers SIGTERM (Nomad's kill signal for the task) by killing
// every other process of the container at once (SIGKILL), forwards SIGINT, SIGHUP and
// SIGQUIT, and exits with the command's exit code (128+n if signal n killed it). It
// exits 125 (as the bridge does) when it cannot start argv.
package main

import (
	"archive/tar"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/internal/initenv"
)

const exitFailed = 125

// stdout and stderr are the task's streams, counted for -flushed; out and errOut
// write to them, as frames with -capture.
var (
	stdout = &countingWriter{w: os.Stdout}
	stderr = &countingWriter{w: os.Stderr}

	out    io.Writer = stdout
	errOut io.Writer = stderr
)

func main() {
	fs := flag.NewFlagSet("sandbox-nomad-init", flag.ContinueOnError)
	keep := fs.String("keep", "", "comma-separated `names` of the variables to keep (besides PATH, HOME, HOSTNAME)")
	b64 := fs.String("b64", "", "comma-separated `names` of kept variables whose values arrive base64-encoded (so Nomad cannot interpolate them): decoded before the command starts")
	wait := fs.String("wait", "", "unix `socket` to wait for before starting argv")
	waitTimeout := fs.Duration("wait-timeout", 30*time.Second, "how long to wait for -wait")
	capture := fs.Bool("capture", false, "cap the command's stdout and stderr at -max bytes each (one more is passed on to flag truncation)")
	maxBytes := fs.Int64("max", 2<<20, "bytes kept of each stream with -capture")
	flushed := fs.String("flushed", "", "the `files` OUT,ERR (read-only) where the node stores the task's stdout and stderr: wait until they hold what was written before exiting")
	flushTimeout := fs.Duration("flush-timeout", 10*time.Second, "how long to wait for -flushed")
	unwritable := fs.String("unwritable", "", "comma-separated `directories` that must not be writable (Nomad's directories the runtime should hide): refuse to start argv if one is")
	unpackFrom := fs.String("unpack", "", "tar `file` to unpack into -into, then exit")
	into := fs.String("into", "", "`directory` to unpack into")
	export := fs.String("export", "", "`directory` to send back as a tar archive on stderr once the command has ended (with -capture)")
	exportMax := fs.Int64("export-max", 256<<20, "most bytes of archive -export sends")
	exportFiles := fs.Int("export-files", 10000, "most files -export sends")
	if err := fs.Parse(os.Args[1:]); err == nil && *unpackFrom != "" && *into != "" && fs.NArg() == 0 {
		if err := unpack(*unpackFrom, *into); err != nil {
			fmt.Fprintf(os.Stderr, "sandbox-nomad-init: unpacking the workspace: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Not dumpable: a process of the same user cannot ptrace the init or open its
	// file descriptors through /proc (the streams it caps).
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
	if *capture {
		out, errOut = &frames{w: stdout}, &frames{w: stderr}
	}
	var logFiles []string
	if *flushed != "" {
		if logFiles = strings.Split(*flushed, ","); len(logFiles) != 2 {
			fmt.Fprintln(errOut, "sandbox-nomad-init: -flushed takes two files, OUT,ERR")
			os.Exit(exitFailed)
		}
	}
	exit := func(code int) {
		if logFiles != nil {
			if err := flush(logFiles, []*countingWriter{stdout, stderr}, *flushTimeout); err != nil {
				fmt.Fprintf(os.Stderr, "sandbox-nomad-init: %v\n", err)
			}
		}
		os.Exit(code)
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(errOut, "usage: sandbox-nomad-init [-unwritable DIRS] [-keep NAMES] [-wait SOCKET] [-capture -max N [-flushed OUT,ERR]] -- argv...")
		exit(exitFailed)
	}
	env, err := decode(initenv.Filter(*keep), *b64)
	if err != nil {
		fmt.Fprintf(errOut, "sandbox-nomad-init: %v\n", err)
		exit(exitFailed)
	}
	for _, dir := range strings.Split(*unwritable, ",") {
		if dir == "" {
			continue
		}
		if err := checkUnwritable(dir); err != nil {
			fmt.Fprintf(errOut, "sandbox-nomad-init: %v\n", err)
			exit(exitFailed)
		}
	}
	if *unpackFrom != "" && *into != "" {
		if err := unpack(*unpackFrom, *into); err != nil {
			fmt.Fprintf(errOut, "sandbox-nomad-init: unpacking the workspace: %v\n", err)
			exit(exitFailed)
		}
	}
	if *wait != "" {
		waitFor(*wait, *waitTimeout)
	}
	argv := fs.Args()
	if !*capture {
		err := syscall.Exec(argv[0], argv, env)
		fmt.Fprintf(errOut, "sandbox-nomad-init: exec %s: %v\n", argv[0], err)
		exit(exitFailed)
	}
	code := supervise(argv, env, *maxBytes)
	if *export != "" {
		// Nothing of the sandbox may write while the workspace is read: every other
		// process of the container (the init is PID 1) dies first.
		_ = syscall.Kill(-1, syscall.SIGKILL)
		exportDir(*export, stderr, *exportMax, *exportFiles)
	}
	exit(code)
}

// countingWriter counts the bytes written through it.
// (The count never waits for a write in progress, which the node's log collection
// may hold up.)
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingWriter) count() int64 { return c.n.Load() }

// frameMax is the most raw bytes in one frame: its line (base64, under 11 KiB) stays
// below Docker's 16 KiB log buffer, so Docker never splits it. frameWait is how long a
// frame waits for more bytes.
const (
	frameMax  = 8 << 10
	frameWait = 10 * time.Millisecond
)

// frames writes what it is given as frames: lines of base64 of at most frameMax bytes.
type frames struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frames) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 0; i < len(p); i += frameMax {
		chunk := p[i:min(i+frameMax, len(p))]
		line := make([]byte, base64.StdEncoding.EncodedLen(len(chunk))+1)
		base64.StdEncoding.Encode(line, chunk)
		line[len(line)-1] = '\n'
		if _, err := f.w.Write(line); err != nil {
			return i, err
		}
	}
	return len(p), nil
}

// pump passes at most max bytes of src (one of the command's pipes) on to w, a frame
// per burst: after the first bytes it waits frameWait for more, up to frameMax. The
// rest of src is read and dropped.
func pump(src *os.File, w io.Writer, max int64) {
	buf := make([]byte, frameMax)
	for left := max; left > 0; {
		size := int(min(int64(frameMax), left))
		n, err := src.Read(buf[:size])
		if n > 0 && n < size && err == nil {
			_ = src.SetReadDeadline(time.Now().Add(frameWait))
			for n < size {
				m, rerr := src.Read(buf[n:size])
				n += m
				if rerr != nil {
					if !errors.Is(rerr, os.ErrDeadlineExceeded) {
						err = rerr
					}
					break
				}
			}
			_ = src.SetReadDeadline(time.Time{})
		}
		if n > 0 {
			_, _ = w.Write(buf[:n])
			left -= int64(n)
		}
		if err != nil {
			return
		}
	}
	_, _ = io.Copy(io.Discard, src)
}

// flush waits until each file of files (where the node stores the task's streams)
// holds at least what went through the matching writer, or timeout passes.
func flush(files []string, ws []*countingWriter, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for d := 5 * time.Millisecond; ; d = min(2*d, 50*time.Millisecond) {
		behind := ""
		for i, f := range files {
			want := ws[i].count()
			if want == 0 {
				continue
			}
			if fi, err := os.Stat(f); err != nil || fi.Size() < want {
				behind = f
			}
		}
		if behind == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not receive all the output in %v", behind, timeout)
		}
		time.Sleep(d)
	}
}

// checkUnwritable fails when a file can be created in dir: a directory of Nomad's
// bound there was meant to be hidden by the runtime's masked paths, and a runtime
// that does not mask it would leave the sandbox a writable directory on the node's
// disk with no bound.
func checkUnwritable(dir string) error {
	f, err := os.CreateTemp(dir, ".sandbox-probe-")
	if err != nil {
		return nil
	}
	name := f.Name()
	f.Close()
	os.Remove(name)
	return fmt.Errorf("%s is writable: this runtime does not hide the Nomad directory bound there; refusing to run", dir)
}

// decode replaces the base64 values of the variables named in names with what they
// encode: values Nomad would otherwise have interpolated (${...}).
func decode(env []string, names string) ([]string, error) {
	set := map[string]bool{}
	for _, k := range strings.Split(names, ",") {
		if k != "" {
			set[k] = true
		}
	}
	for i, kv := range env {
		name, v, _ := strings.Cut(kv, "=")
		if !set[name] {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("variable %s: not base64: %v", name, err)
		}
		env[i] = name + "=" + string(raw)
	}
	return env, nil
}

// waitFor dials socket until it accepts a connection or timeout passes; the command
// starts either way (the bridge reports what fails later).
func waitFor(socket string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for d := 5 * time.Millisecond; ; d = min(2*d, 200*time.Millisecond) {
		c, err := net.DialTimeout("unix", socket, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "sandbox-nomad-init: %s did not accept connections in %v: %v\n", socket, timeout, err)
			return
		}
		time.Sleep(d)
	}
}

// supervise runs argv with its output capped and passed on, and returns its exit
// code.
func supervise(argv, env []string, max int64) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin = os.Stdin
	// Pipes of our own (exec's would be closed by Wait, which is not called): they
	// take read deadlines.
	outR, outW, err := os.Pipe()
	if err == nil {
		var errR, errW *os.File
		if errR, errW, err = os.Pipe(); err == nil {
			cmd.Stdout, cmd.Stderr = outW, errW
			err = cmd.Start()
			outW.Close()
			errW.Close()
			if err == nil {
				return wait(cmd, []*os.File{outR, errR}, []io.Writer{out, errOut}, max)
			}
		}
	}
	fmt.Fprintf(errOut, "sandbox-nomad-init: cannot start %s: %v\n", argv[0], err)
	return exitFailed
}

func wait(cmd *exec.Cmd, srcs []*os.File, dsts []io.Writer, max int64) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM {
				// Nomad stops the sandbox: every process of it (the init is PID 1 of
				// the container; -1 is all the others) dies at once, and the init
				// exits once its output is stored.
				_ = syscall.Kill(-1, syscall.SIGKILL)
				continue
			}
			_ = cmd.Process.Signal(s)
		}
	}()
	copied := make(chan struct{}, len(srcs))
	for i := range srcs {
		go func() {
			// max+1 bytes are passed on; the rest is read and dropped.
			pump(srcs[i], dsts[i], max+1)
			copied <- struct{}{}
		}()
	}
	// exec.Cmd.Wait would wait for the pipes, which a process the command left behind
	// may hold open; wait for the process, then give the copies a moment.
	state, err := cmd.Process.Wait()
	for range srcs {
		select {
		case <-copied:
		case <-time.After(5 * time.Second):
		}
	}
	if err != nil {
		return exitFailed
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

// unpack extracts the regular files and directories of the tar file src into dst,
// refusing any name that is not local (absolute, or with ".." segments).
func unpack(src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(h.Name, "/")
		if !filepath.IsLocal(name) {
			return fmt.Errorf("%q is not a local name", h.Name)
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, mode|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode|0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		}
	}
}
