package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/proxydapi"
	internalproxyd "github.com/agentsandbox/sandbox/internal/proxydaemon"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/runtoken"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// ctl runs one sandboxctl command line and returns its exit code and output.
func ctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpAndUsage(t *testing.T) {
	code, out, _ := ctl(t, "--help")
	for _, cmd := range []string{"doctor", "ps", "sweep", "logs", "exec", "stop", "proxyd runs|usage", "proxyd audit", "Exit codes"} {
		if !strings.Contains(out, cmd) {
			t.Errorf("--help does not mention %q", cmd)
		}
	}
	if code != exitOK {
		t.Errorf("--help exit %d", code)
	}
	for _, cmd := range []string{"doctor", "ps", "sweep", "exec", "stop", "logs"} {
		if code, _, errs := ctl(t, cmd, "--help"); code != exitOK || !strings.Contains(errs, "-owner") {
			t.Errorf("%s --help: exit %d %q", cmd, code, errs)
		}
	}
	if code, _, _ := ctl(t, "ps", "--no-such-flag"); code != exitUsage {
		t.Errorf("bad flag: exit %d", code)
	}
	if code, _, _ := ctl(t); code != exitUsage {
		t.Errorf("no command: exit %d", code)
	}
	if code, _, errs := ctl(t, "frobnicate"); code != exitUsage || !strings.Contains(errs, "unknown command") {
		t.Errorf("unknown command: exit %d %q", code, errs)
	}
	if code, _, errs := ctl(t, "sweep", "--dry-run"); code != exitUsage || !strings.Contains(errs, "--owner is required") {
		t.Errorf("sweep without owner: exit %d %q", code, errs)
	}
	if code, _, _ := ctl(t, "exec", "--owner", "o", "--runtime", "podman", "id", "true"); code != exitUsage {
		t.Errorf("exec on an unknown runtime: exit %d", code)
	}
}

// stoppedSocket is a unix socket path the test listened on and stopped: the file
// is there, nothing answers (a daemon that died).
func stoppedSocket(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	ln, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	return p
}

// TestDoctor: on this machine Docker and containerd are fine; pointed at daemons
// the test started and stopped, those lines fail with a fix and the exit code is 1.
func TestDoctor(t *testing.T) {
	needRuntimes(t)
	code, out, _ := ctl(t, "doctor", "--json")
	var checks []check
	if err := json.Unmarshal([]byte(out), &checks); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]check{}
	for _, c := range checks {
		got[c.Name] = c
		if c.Status != statusOK && c.Fix == "" {
			t.Errorf("%s is %s without a fix", c.Name, c.Status)
		}
	}
	for _, name := range []string{"docker", "containerd", "cgroups", "mount API", "pid_max", "nofile", "nginx", "openclaw", "runsc (docker)"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no %s line", name)
		}
	}
	if got["docker"].Status != statusOK || !strings.Contains(got["docker"].Detail, "Docker ") || got["containerd"].Status != statusOK || !strings.Contains(got["containerd"].Detail, "containerd ") {
		t.Errorf("docker %+v containerd %+v", got["docker"], got["containerd"])
	}
	if code != exitOK {
		t.Errorf("a healthy machine: exit %d\n%s", code, out)
	}

	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	dockerSock, ctrdSock := stoppedSocket(t, dir, "docker.sock"), stoppedSocket(t, dir, "containerd.sock")
	code, out, _ = ctl(t, "doctor", "--docker-host", "unix://"+dockerSock, "--containerd-address", ctrdSock)
	if code != exitFailed {
		t.Errorf("stopped daemons: exit %d", code)
	}
	for _, want := range []string{"docker          fail    unreachable at unix://" + dockerSock, "containerd      fail    unreachable at " + ctrdSock, "fix: start the daemon", "fix: start containerd"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

func needRuntimes(t *testing.T) {
	t.Helper()
	cli, err := dockerClient("")
	if err == nil {
		_, err = cli.Info(context.Background(), dockerInfoOptions())
		cli.Close()
	}
	testenv.Need(t, "docker", err == nil, "no Docker daemon")
	_, err = os.Stat("/run/containerd/containerd.sock")
	testenv.Need(t, "containerd", err == nil, "no containerd")
}

type sessionRunner interface {
	port.SessionRunner
	port.Sweeper
}

func TestSessionsDocker(t *testing.T)     { testSessions(t, "docker") }
func TestSessionsContainerd(t *testing.T) { testSessions(t, "containerd") }

// testSessions: ps, exec, logs, stop and sweep on live sessions of a real runtime.
// About 5 s per runtime.
func testSessions(t *testing.T, runtime string) {
	needRuntimes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	owner := testenv.Owner("ctl")
	sessDir, err := os.MkdirTemp("", "ctls")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sessDir)
	const ns = "agentsandbox-test"
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var r sessionRunner
	switch runtime {
	case "docker":
		cli, err := dockerClient("")
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
			t.Fatal(err)
		}
		if r, err = docker.NewRunner(docker.WithClient(cli), docker.WithBridge(testenv.Bridge(t)), docker.WithOwner(owner), docker.WithSessionDir(sessDir)); err != nil {
			t.Fatal(err)
		}
	case "containerd":
		cr, err := containerd.NewRunner(containerd.WithNamespace(ns), containerd.WithBridge(testenv.Bridge(t)), containerd.WithOwner(owner), containerd.WithSessionDir(sessDir))
		if err != nil {
			t.Fatal(err)
		}
		defer cr.Close()
		if _, err := cr.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
			t.Fatal(err)
		}
		r = cr
	}
	// Whatever happens, nothing of this owner is left.
	defer r.Sweep(context.Background(), port.SweepOptions{})
	flags := []string{"--owner", owner, "--runtime", runtime, "--session-dir", sessDir, "--namespace", ns}
	// The agent waits for a file the test writes from the host, in the workspace: an
	// exec would be a second attached handle, and on containerd it could read the
	// output meant for the follower (a FIFO has one reader at a time).
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(name string) port.Session {
		s, err := r.Start(ctx, port.SessionSpec{RunSpec: port.RunSpec{RunID: sandboxtest.RunID(name), Image: ref, WorkspaceDir: ws,
			Argv: []string{"/agent", "await", "/workspace/go-" + name, "out-" + name, "err-" + name}, Limits: port.Limits{Timeout: 2 * time.Minute}}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ps := func() []entry {
		t.Helper()
		code, out, errs := ctl(t, append([]string{"ps", "--json"}, flags...)...)
		if code != exitOK {
			t.Fatalf("ps: exit %d %s", code, errs)
		}
		var es []entry
		if err := json.Unmarshal([]byte(out), &es); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return es
	}

	s := start("ctl1")
	es := ps()
	if len(es) != 1 || es[0].RunID != s.RunID() || es[0].Kind != port.KindSession || es[0].State != "running" || es[0].Owner != owner || es[0].Runtime != runtime {
		t.Fatalf("ps %+v", es)
	}
	if code, out, _ := ctl(t, append([]string{"ps", "--runtime", runtime, "--owner", owner}, "--namespace", ns)...); code != exitOK || !strings.Contains(out, s.RunID()) || !strings.Contains(out, "RUNTIME") {
		t.Errorf("ps table: %d\n%s", code, out)
	}
	code, out, errs := ctl(t, append(append([]string{"exec"}, flags...), s.ID(), "--", "/agent", "echo", "exec-out", "exec-err")...)
	if code != exitOK || out != "exec-out" || errs != "exec-err" {
		t.Errorf("exec: exit %d out %q err %q", code, out, errs)
	}
	if code, _, _ := ctl(t, append(append([]string{"exec"}, flags...), s.ID(), "/agent", "exit", "7")...); code != 7 {
		t.Errorf("exec exit 7: sandboxctl exit %d", code)
	}
	if code, _, errs := ctl(t, append(append([]string{"exec"}, flags...), "no-such-session", "/agent", "id")...); code != exitNotFound {
		t.Errorf("exec on no session: exit %d %s", code, errs)
	}
	// logs streams what the session prints once attached: the agent waits for a file
	// that the test then writes, and prints " done". The starting host lets go first
	// (on containerd a session's output FIFO has one reader: the handle holding it).
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	logsOut := make(chan string, 1)
	var logsErr syncBuf
	go func() {
		var out bytes.Buffer
		lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
		defer lcancel()
		run(lctx, append(append([]string{"logs", "--for", "30s"}, flags...), s.ID()), &out, &logsErr)
		logsOut <- out.String()
	}()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logsErr.String(), "following session"); {
		if time.Now().After(deadline) {
			t.Fatalf("logs never attached: %s", logsErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(ws, "go-ctl1"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-logsOut:
		if !strings.Contains(out, " done") {
			t.Errorf("logs: %q (stderr %q)", out, logsErr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("logs did not end with the session")
	}
	code, out, _ = ctl(t, append(append([]string{"stop", "--json", "--grace", "1s"}, flags...), s.ID())...)
	if code != exitOK || !strings.Contains(out, `"stopped":true`) {
		t.Errorf("stop: exit %d %s", code, out)
	}
	if es := ps(); len(es) != 0 {
		t.Errorf("after stop: ps %+v", es)
	}

	// A session whose host went away (detached): a sweep finds it by owner.
	s2 := start("ctl2")
	if err := s2.Detach(); err != nil {
		t.Fatal(err)
	}
	code, out, _ = ctl(t, append([]string{"sweep", "--json", "--older-than", "0s", "--dry-run"}, flags...)...)
	var reps []sweepReport
	if err := json.Unmarshal([]byte(out), &reps); err != nil || code != exitOK || len(reps) != 1 || !strings.Contains(strings.Join(reps[0].Removed, " "), s2.ID()) || !reps[0].DryRun {
		t.Fatalf("sweep --dry-run: exit %d %s (%v)", code, out, err)
	}
	if es := ps(); len(es) != 1 || es[0].State != "running" {
		t.Errorf("a dry run removed something: %+v", es)
	}
	if code, out, _ = ctl(t, append([]string{"sweep", "--older-than", "0s"}, flags...)...); code != exitOK || !strings.Contains(out, s2.ID()) {
		t.Errorf("sweep: exit %d\n%s", code, out)
	}
	if es := ps(); len(es) != 0 {
		t.Errorf("after sweep: ps %+v", es)
	}
}

// TestProxyd: runs, usage and audit over a daemon's admin socket.
func TestProxyd(t *testing.T) {
	dir, err := os.MkdirTemp("", "ctlp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := internalproxyd.Open(context.Background(), internalproxyd.Config{StateDir: filepath.Join(dir, "state"), SocketDir: filepath.Join(dir, "runs"),
		Keys: runtoken.Keys{Current: []byte("sandboxctl-test-secret-0123456789abcdef")}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	adminSock := filepath.Join(dir, "admin.sock")
	ln, err := internalproxyd.ListenAdmin(adminSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go srv.ServeAdmin(ln)
	cli, err := proxyd.NewClient(adminSock)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	fake := litellmtest.NewServer()
	defer fake.Close()
	ctx := context.Background()
	reg, err := cli.Register(ctx, proxyd.RegisterRequest{RunID: "ctl-run-1", Upstream: fake.URL, APIKey: fake.MasterKey(),
		Attribution: proxydapi.Attribution{BillingAccountID: "acct"}, Budget: proxydapi.Budget{MaxCalls: 1}})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", reg.SocketPath)
	}}}
	defer hc.CloseIdleConnections()
	for i := 0; i < 2; i++ { // one call, one over the budget
		req, _ := http.NewRequest(http.MethodPost, "http://sandbox/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set(runtoken.Header, reg.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	sock := []string{"--admin-socket", adminSock}
	code, out, _ := ctl(t, append([]string{"proxyd", "runs", "--json"}, sock...)...)
	var runs []proxyd.RunInfo
	if err := json.Unmarshal([]byte(out), &runs); err != nil || code != exitOK || len(runs) != 1 || runs[0].RunID != "ctl-run-1" || runs[0].Calls != 1 {
		t.Errorf("runs: exit %d %s", code, out)
	}
	code, out, _ = ctl(t, append([]string{"proxyd", "usage"}, sock...)...)
	if code != exitOK || !strings.Contains(out, "ctl-run-1") || !strings.Contains(out, "TOTAL (1 runs)") {
		t.Errorf("usage: exit %d\n%s", code, out)
	}
	code, out, _ = ctl(t, append([]string{"proxyd", "audit"}, append(sock, reg.ID)...)...)
	if code != exitOK || !strings.Contains(out, "200") || !strings.Contains(out, "budget_exceeded") || strings.Count(out, "\n") != 3 {
		t.Errorf("audit: exit %d\n%s", code, out)
	}
	// --follow prints the stored records, then the run's end ends the stream.
	done := make(chan string)
	go func() {
		_, out, _ := ctl(t, append([]string{"proxyd", "audit", "--follow", "--json"}, append(sock, reg.ID)...)...)
		done <- out
	}()
	time.Sleep(300 * time.Millisecond)
	if _, err := cli.Deregister(ctx, reg.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-done:
		if strings.Count(out, `"run_id":"ctl-run-1"`) != 2 {
			t.Errorf("audit --follow: %s", out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("audit --follow did not end with the run")
	}
	if code, _, _ := ctl(t, append([]string{"proxyd", "audit"}, append(sock, "nope")...)...); code != exitNotFound {
		t.Errorf("audit of no run: exit %d", code)
	}
	if code, _, _ := ctl(t, "proxyd", "runs", "--admin-socket", filepath.Join(dir, "none.sock")); code != exitUnavailable {
		t.Errorf("no daemon: exit %d", code)
	}
}

// tail prints only what a ring snapshot adds, also once the ring is full and moves.
func TestTail(t *testing.T) {
	var out bytes.Buffer
	var tl tail
	for _, snap := range []string{"", "abc", "abc", "abcdef", "cdefgh", "cdefgh", "zzzz"} {
		tl.write(&out, []byte(snap))
	}
	if out.String() != "abcdefghzzzz" {
		t.Errorf("printed %q", out.String())
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
