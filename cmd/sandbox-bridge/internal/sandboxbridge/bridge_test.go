package sandboxbridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	bridgebuild "github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// childEnv makes the test binary act as an agent: it GETs the URL in the variable once,
// with no retry, prints the body and exits 0 on HTTP 200.
const childEnv = "BRIDGE_TEST_CHILD_GET"

func TestMain(m *testing.M) {
	if u := os.Getenv(childEnv); u != "" {
		resp, err := http.Get(u)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		b, _ := io.ReadAll(resp.Body)
		fmt.Print(string(b))
		if resp.StatusCode != http.StatusOK {
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func needSh(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on PATH")
	}
}

// shortDir is a temporary directory with a short path, for unix sockets.
func shortDir(t *testing.T) string { return testenv.ShortDir(t, "br") }

// socketHTTP serves h on a unix socket and returns the socket's path.
func socketHTTP(t *testing.T, h http.Handler) string {
	sock := filepath.Join(shortDir(t), "llm.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// freePort is a free loopback address.
func freePort(t *testing.T) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
}

func outFile(t *testing.T) *os.File {
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func contents(t *testing.T, f *os.File) string {
	b, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	return string(b)
}

func TestDefaultsMatchThePort(t *testing.T) {
	assert.Equal(t, port.BridgeAddr, DefaultListen)
	assert.Equal(t, path.Join(port.LLMSocketDir, port.LLMSocketName), DefaultSocket)
}

// TestChildReachesTheSocket runs an agent that makes one HTTP call, without retrying, as
// soon as it starts: it only succeeds if the listener was up before the child started.
func TestChildReachesTheSocket(t *testing.T) {
	sock := socketHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proxy saw %s %s", r.Method, r.URL.Path)
	}))
	addr := freePort(t)
	stdout := outFile(t)
	// os/signal starts one watcher goroutine for the life of the process on first use.
	_, _ = Run(context.Background(), Config{Listen: "127.0.0.1:0", Argv: []string{"true"}})
	ignore := goleak.IgnoreCurrent()
	code, err := Run(context.Background(), Config{
		Listen: addr, Socket: sock,
		Argv:   []string{os.Args[0], "-test.run=^$"},
		Env:    append(os.Environ(), childEnv+"=http://"+addr+"/v1/models"),
		Stdout: stdout,
	})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "proxy saw GET /v1/models", contents(t, stdout))

	_, err = net.Dial("tcp", addr)
	assert.Error(t, err, "the listener is closed when Run returns")
	goleak.VerifyNone(t, ignore) // no goroutine outlives Run
}

// runWithPipe runs the bridge with a child that waits for its stdin to close, and
// returns the bridge's address, and a function that ends the child and returns Run's
// results.
func runWithPipe(t *testing.T, sock string) (string, func() (int, error)) {
	needSh(t)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	addrc := make(chan string, 1)
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := Run(context.Background(), Config{
			Listen: "127.0.0.1:0", Socket: sock,
			Argv:  []string{"sh", "-c", "cat >/dev/null"},
			Stdin: r,
			Ready: func(a net.Addr) { addrc <- a.String() },
		})
		done <- result{code, err}
	}()
	var addr string
	select {
	case addr = <-addrc:
	case res := <-done:
		t.Fatalf("Run returned early: %d %v", res.code, res.err)
	}
	stop := func() (int, error) {
		w.Close()
		res := <-done
		r.Close()
		return res.code, res.err
	}
	return addr, stop
}

func TestHalfCloseIsForwarded(t *testing.T) {
	// An echo server that answers only after its client has finished sending.
	sock := filepath.Join(shortDir(t), "echo.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the client's half-close arrives
				fmt.Fprintf(c, "got %q", b)
			}()
		}
	}()
	addr, stop := runWithPipe(t, sock)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "ping")
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, `got "ping"`, string(b))

	code, err := stop()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
}

func TestStreamsPassChunkByChunk(t *testing.T) {
	const chunks = 4
	ack := make(chan int)
	sock := socketHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for k := range chunks {
			fmt.Fprintf(w, "data: %d\n\n", k)
			w.(http.Flusher).Flush()
			select {
			case <-ack: // the client saw chunk k
			case <-r.Context().Done():
				return
			}
		}
	}))
	addr, stop := runWithPipe(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for k := range chunks {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("data: %d\n", k), line)
		_, _ = br.ReadString('\n')
		ack <- k
	}
	resp.Body.Close()
	code, err := stop()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
}

func TestSocketMissingClosesTheConnection(t *testing.T) {
	addr, stop := runWithPipe(t, filepath.Join(shortDir(t), "absent.sock"))
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
	n, err := c.Read(make([]byte, 1))
	assert.Zero(t, n)
	assert.ErrorIs(t, err, io.EOF, "the client sees the connection closed, not a hang")
	c.Close()
	code, err := stop()
	require.NoError(t, err)
	assert.Equal(t, 0, code, "a missing socket does not stop the bridge")
}

func TestExitCodePassThrough(t *testing.T) {
	needSh(t)
	for script, want := range map[string]int{
		"exit 0":        0,
		"exit 3":        3,
		"exit 255":      255,
		"kill -KILL $$": 128 + int(syscall.SIGKILL),
		"kill -TERM $$": 128 + int(syscall.SIGTERM),
	} {
		t.Run(script, func(t *testing.T) {
			code, err := Run(context.Background(), Config{Listen: "127.0.0.1:0", Argv: []string{"sh", "-c", script}})
			require.NoError(t, err)
			assert.Equal(t, want, code)
		})
	}
}

func TestReapModeExitCode(t *testing.T) {
	needSh(t)
	// Reap mode waits with wait4(-1) instead of cmd.Wait; the exit code is the same.
	code, err := Run(context.Background(), Config{Listen: "127.0.0.1:0", Argv: []string{"sh", "-c", "exit 9"}, Reap: true})
	require.NoError(t, err)
	assert.Equal(t, 9, code)
}

func TestCommandProblems(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "not-executable")
	require.NoError(t, os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644))
	noInterp := filepath.Join(dir, "bad-interpreter")
	require.NoError(t, os.WriteFile(noInterp, []byte("#!/nonexistent/interpreter\n"), 0o755))
	cases := []struct {
		argv0 string
		code  int
		err   error
	}{
		{"definitely-not-a-command-4f2a", bridgeapi.ExitNotFound, bridgeapi.ErrCommandNotFound},
		{"/nonexistent/agent", bridgeapi.ExitNotFound, bridgeapi.ErrCommandNotFound},
		{noInterp, bridgeapi.ExitNotFound, bridgeapi.ErrCommandNotFound},
		{plain, bridgeapi.ExitCannotExec, bridgeapi.ErrCannotExec},
		{dir, bridgeapi.ExitCannotExec, bridgeapi.ErrCannotExec},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.argv0), func(t *testing.T) {
			code, err := Run(context.Background(), Config{Listen: "127.0.0.1:0", Argv: []string{c.argv0, "arg"}})
			assert.Equal(t, c.code, code)
			require.ErrorIs(t, err, c.err)
			assert.Contains(t, err.Error(), c.argv0, "the message names the command")
		})
	}
}

func TestInvalidConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no argv":         {Listen: "127.0.0.1:0"},
		"empty argv0":     {Listen: "127.0.0.1:0", Argv: []string{""}},
		"all interfaces":  {Listen: "0.0.0.0:8080", Argv: []string{"true"}},
		"no host":         {Listen: ":8080", Argv: []string{"true"}},
		"private address": {Listen: "10.0.0.1:8080", Argv: []string{"true"}},
		"ipv6 any":        {Listen: "[::]:8080", Argv: []string{"true"}},
		"host name":       {Listen: "localhost:8080", Argv: []string{"true"}},
		"no port":         {Listen: "127.0.0.1", Argv: []string{"true"}},
	} {
		t.Run(name, func(t *testing.T) {
			code, err := Run(context.Background(), cfg)
			assert.Equal(t, bridgeapi.ExitBridgeFailed, code)
			assert.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
	code, err := Run(context.Background(), Config{Listen: "[::1]:0", Argv: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "listen") { // hosts without IPv6 cannot listen
		assert.Equal(t, 0, code, "IPv6 loopback is accepted: %v", err)
	}
}

func TestListenFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	code, err := Run(context.Background(), Config{Listen: busy.Addr().String(), Argv: []string{"true"}})
	assert.Equal(t, bridgeapi.ExitBridgeFailed, code)
	assert.ErrorContains(t, err, "listen")
}

func TestContextEndTerminatesTheChild(t *testing.T) {
	needSh(t)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := Run(ctx, Config{
			Listen: "127.0.0.1:0", Stdout: w,
			Argv: []string{"sh", "-c", `trap 'exit 5' TERM; echo ready; while :; do sleep 0.05; done`},
		})
		done <- result{code, err}
	}()
	line, err := bufio.NewReader(r).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	cancel()
	res := <-done
	w.Close()
	assert.Equal(t, 5, res.code, "the child got SIGTERM and exited its own way")
	assert.ErrorIs(t, res.err, context.Canceled)
}

// bridgeBinary builds cmd/sandbox-bridge (cached by content across test binaries).
func bridgeBinary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is needed to build the bridge")
	}
	dir := filepath.Join(os.TempDir(), "agentsandbox-bridge-test")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := bridgebuild.Build(ctx, dir)
	require.NoError(t, err)
	return bin
}

// startBinary runs the bridge binary with a shell script as the child and waits until
// the script prints "ready".
func startBinary(t *testing.T, flags []string, script string) (*exec.Cmd, *lockedBuilder) {
	needSh(t)
	bin := bridgeBinary(t)
	args := append(append([]string{"-listen", "127.0.0.1:0"}, flags...), "--", "sh", "-c", script)
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := new(lockedBuilder)
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Wait() // the copy of stderr is done then
		t.Fatalf("reading the child's first line: %v; stderr: %s", err, stderr.String())
	}
	require.Equal(t, "ready\n", line)
	return cmd, stderr
}

// lockedBuilder is a strings.Builder safe to read while exec's copier writes to it.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func exitOf(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(30 * time.Second):
		t.Fatal("the bridge did not exit")
		return -1
	}
}

func TestBinaryForwardsSignals(t *testing.T) {
	cases := []struct {
		name   string
		script string
		sig    syscall.Signal
		want   int
	}{
		{"trapped TERM", `trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done`, syscall.SIGTERM, 42},
		{"INT kills", `echo ready; exec sleep 60`, syscall.SIGINT, 128 + int(syscall.SIGINT)},
		{"HUP kills", `echo ready; exec sleep 60`, syscall.SIGHUP, 128 + int(syscall.SIGHUP)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd, stderr := startBinary(t, nil, c.script)
			require.NoError(t, cmd.Process.Signal(c.sig))
			assert.Equal(t, c.want, exitOf(t, cmd), "stderr: %s", stderr.String())
		})
	}
}

// TestBinaryReapsOrphans leaves an orphan that is re-parented to the bridge (as a
// subreaper, standing in for PID 1). kill -0 succeeds on a zombie, so the script only
// gets past its loop once the bridge has reaped the orphan.
func TestBinaryReapsOrphans(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "orphan.pid")
	script := fmt.Sprintf(`(sleep 0 & echo $! > %s); echo ready; while kill -0 "$(cat %s)" 2>/dev/null; do sleep 0.01; done; exit 7`, pidFile, pidFile)
	cmd, stderr := startBinary(t, []string{"-subreaper"}, script)
	assert.Equal(t, 7, exitOf(t, cmd), "stderr: %s", stderr.String())
}

func TestBinaryMissingCommand(t *testing.T) {
	bin := bridgeBinary(t)
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "--", "no-such-agent-9c1d")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	assert.Equal(t, bridgeapi.ExitNotFound, exitOf(t, cmd))
	assert.Contains(t, stderr.String(), "command not found: no-such-agent-9c1d")
}

// TestBinaryDeadlineStopsTheCommand: the sandbox's time limit holds inside it, with no
// host to enforce it: TERM at the deadline, KILL after the grace, and a notice.
func TestBinaryDeadlineStopsTheCommand(t *testing.T) {
	for _, c := range []struct {
		name, script string
		want         int
	}{
		{"TERM obeyed", `trap 'exit 9' TERM; echo ready; while :; do sleep 0.05; done`, 9},
		{"TERM ignored", `trap '' TERM; echo ready; while :; do sleep 0.05; done`, 128 + int(syscall.SIGKILL)},
	} {
		t.Run(c.name, func(t *testing.T) {
			bridgeBinary(t) // built before the clock starts
			deadline := time.Now().Add(700 * time.Millisecond)
			cmd, stderr := startBinary(t, []string{"-deadline", fmt.Sprint(deadline.UnixMilli()), "-grace", "300ms"}, c.script)
			assert.Equal(t, c.want, exitOf(t, cmd), "stderr: %s", stderr.String())
			late := time.Since(deadline)
			assert.Greater(t, late, time.Duration(0), "stopped before the deadline")
			assert.Less(t, late, 5*time.Second, "stopped %v after the deadline", late)
			assert.Contains(t, stderr.String(), "deadline passed")
		})
	}
}

func TestBinaryNoForwardListensNowhere(t *testing.T) {
	needSh(t)
	bin := bridgeBinary(t)
	port := freePort(t)
	// The child succeeds only if nothing listens on the bridge's address.
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s 2>/dev/null && exit 1; exit 0`, strings.Replace(port, ":", "/", 1))
	cmd := exec.Command(bin, "-no-forward", "-listen", port, "--", "bash", "-c", script)
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "something listened on %s with -no-forward: %s", port, out)
}

// TestAttestationMatchesThePort: the bridge's report decodes into port.Attestation
// field for field (one type: bridgeapi.Attestation), at the path the proxies serve.
func TestAttestationMatchesThePort(t *testing.T) {
	assert.Equal(t, port.AttestationPath, bridgeapi.AttestationPath)
	a := Attest()
	b, err := json.Marshal(a)
	require.NoError(t, err)
	var pa port.Attestation
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&pa))
	back, err := json.Marshal(pa)
	require.NoError(t, err)
	assert.JSONEq(t, string(b), string(back))
	assert.Equal(t, os.Getuid(), pa.UID)
	assert.NotEmpty(t, pa.Interfaces)
	assert.NotEmpty(t, pa.CapBnd)
	assert.Equal(t, port.KernelLinux, pa.Kernel, "the host's own kernel (tests do not run under gVisor)")
	assert.True(t, strings.HasPrefix(pa.KernelVersion, "Linux version "), pa.KernelVersion)
	assert.Empty(t, pa.Runtime, "the bridge never claims the host's runtime")
	assert.Equal(t, port.KernelGVisor, port.RuntimeKernel("/usr/local/bin/runsc-sandbox"))
}

// TestAttestationPostedBeforeTheChild: with Attest, the proxy has the report before
// the child's first request.
func TestAttestationPostedBeforeTheChild(t *testing.T) {
	var mu sync.Mutex
	var order []string
	sock := socketHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		order = append(order, r.URL.Path)
		mu.Unlock()
		if r.URL.Path == bridgeapi.AttestationPath {
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	listen := freePort(t)
	code, err := Run(context.Background(), Config{
		Listen: listen, Socket: sock, Attest: true,
		Argv: []string{os.Args[0]}, Env: append(os.Environ(), childEnv+"=http://"+listen+"/v1/models"),
	})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{bridgeapi.AttestationPath, "/v1/models"}, order)
}
