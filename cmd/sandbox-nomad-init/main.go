// Command sandbox-nomad-init is the first process of a sandbox on Nomad. It gives the
// sandbox the environment its run asked for, waits for the run's LLM proxy, and runs
// its argv (normally the sandbox bridge) with stdout and stderr captured into capped
// files that the host reads through Nomad's file system API.
//
//	sandbox-nomad-init [-unwritable DIR] [-keep NAME,...] [-b64 NAME,...] [-wait SOCKET] [-stdout FILE -stderr FILE -max N] -- argv...
//	sandbox-nomad-init -unpack TAR -into DIR
//
// With -unpack it only unpacks a workspace (regular files and directories; nothing
// outside DIR, no links) into DIR, which it creates, and exits: the prestart task of a
// run whose workspace is copied into the cluster.
//
// Why each part exists:
//
//   - Nomad adds its own variables (NOMAD_ALLOC_ID, NOMAD_TASK_DIR, ...) to every
//     task's environment and has no setting to leave them out; the command's
//     environment is made of the names in -keep plus PATH, HOME and HOSTNAME only.
//   - Nomad binds the allocation's shared directory (the node's disk, no bound) into
//     every task; the runner binds it where the runtime masks it (NOMAD_ALLOC_DIR),
//     and -unwritable refuses to start argv if it is writable there all the same.
//   - Nomad starts the sandbox task once the proxy's sidecar task runs, not once it
//     listens; -wait dials the unix socket until it accepts a connection (or
//     -wait-timeout passes).
//   - Nomad's docker log collection stops when the container exits, sometimes before it
//     has read the container's last output. With -stdout and -stderr the streams go to
//     files instead, written as they arrive (nothing is lost when the container
//     ends), at most -max+1 bytes each (the host keeps -max and learns whether there
//     was more); the rest is read and dropped so the command never blocks.
//
// Without -stdout it replaces itself with argv (execve). With it, it stays as the
// command's parent: it forwards termination signals, and exits with the command's
// exit code (128+n if signal n killed it). It exits 125 (as the bridge does) when it
// cannot start argv.
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
	"syscall"
	"time"
)

const exitFailed = 125

func main() {
	fs := flag.NewFlagSet("sandbox-nomad-init", flag.ContinueOnError)
	keep := fs.String("keep", "", "comma-separated `names` of the variables to keep (besides PATH, HOME, HOSTNAME)")
	b64 := fs.String("b64", "", "comma-separated `names` of kept variables whose values arrive base64-encoded (so Nomad cannot interpolate them): decoded before the command starts")
	wait := fs.String("wait", "", "unix `socket` to wait for before starting argv")
	waitTimeout := fs.Duration("wait-timeout", 30*time.Second, "how long to wait for -wait")
	stdout := fs.String("stdout", "", "`file` the command's stdout goes to")
	stderr := fs.String("stderr", "", "`file` the command's stderr goes to")
	maxBytes := fs.Int64("max", 2<<20, "bytes kept of each stream (one more is written to flag truncation)")
	unwritable := fs.String("unwritable", "", "`directory` that must not be writable (the allocation directory the runtime should hide): refuse to start argv if it is")
	unpackFrom := fs.String("unpack", "", "tar `file` to unpack into -into, then exit")
	into := fs.String("into", "", "`directory` to unpack into")
	if err := fs.Parse(os.Args[1:]); err == nil && *unpackFrom != "" && *into != "" {
		if err := unpack(*unpackFrom, *into); err != nil {
			fmt.Fprintf(os.Stderr, "sandbox-nomad-init: unpacking the workspace: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if fs.NArg() == 0 || (*stdout == "") != (*stderr == "") {
		fmt.Fprintln(os.Stderr, "usage: sandbox-nomad-init [-unwritable DIR] [-keep NAMES] [-wait SOCKET] [-stdout FILE -stderr FILE -max N] -- argv...")
		os.Exit(exitFailed)
	}
	env, err := decode(environment(*keep), *b64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-nomad-init: %v\n", err)
		os.Exit(exitFailed)
	}
	if *unwritable != "" {
		if err := checkUnwritable(*unwritable); err != nil {
			fmt.Fprintf(os.Stderr, "sandbox-nomad-init: %v\n", err)
			os.Exit(exitFailed)
		}
	}
	if *wait != "" {
		waitFor(*wait, *waitTimeout)
	}
	argv := fs.Args()
	if *stdout == "" {
		err := syscall.Exec(argv[0], argv, env)
		fmt.Fprintf(os.Stderr, "sandbox-nomad-init: exec %s: %v\n", argv[0], err)
		os.Exit(exitFailed)
	}
	os.Exit(supervise(argv, env, *stdout, *stderr, *maxBytes))
}

// checkUnwritable fails when a file can be created in dir: the allocation directory
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
	return fmt.Errorf("%s is writable: this runtime does not hide the allocation directory bound there; refusing to run", dir)
}

func environment(keep string) []string {
	keepSet := map[string]bool{"PATH": true, "HOME": true, "HOSTNAME": true}
	for _, k := range strings.Split(keep, ",") {
		if k != "" {
			keepSet[k] = true
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if keepSet[name] {
			env = append(env, kv)
		}
	}
	return env
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

// supervise runs argv with its output captured and returns its exit code.
func supervise(argv, env []string, stdoutPath, stderrPath string, max int64) int {
	outF, err := create(stdoutPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-nomad-init: %v\n", err)
		return exitFailed
	}
	errF, err := create(stderrPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-nomad-init: %v\n", err)
		return exitFailed
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin = os.Stdin
	outR, err := cmd.StdoutPipe()
	if err == nil {
		var errR io.ReadCloser
		if errR, err = cmd.StderrPipe(); err == nil {
			if err = cmd.Start(); err == nil {
				return wait(cmd, []io.Reader{outR, errR}, []*os.File{outF, errF}, max)
			}
		}
	}
	fmt.Fprintf(errF, "sandbox-nomad-init: cannot start %s: %v\n", argv[0], err)
	return exitFailed
}

func create(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
}

func wait(cmd *exec.Cmd, srcs []io.Reader, dsts []*os.File, max int64) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	copied := make(chan struct{}, len(srcs))
	for i := range srcs {
		go func() {
			// The file takes max+1 bytes; the rest is read and dropped.
			_, _ = io.Copy(dsts[i], io.LimitReader(srcs[i], max+1))
			_, _ = io.Copy(io.Discard, srcs[i])
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
	for _, f := range dsts {
		_ = f.Close()
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
