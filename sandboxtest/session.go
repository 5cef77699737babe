package sandboxtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// SessionHarness is what TestSessions needs from an adapter.
type SessionHarness struct {
	// Runner is the adapter under test; it must also be a port.Sweeper whose owner is
	// used by nothing but this suite (the sweep case sweeps it).
	Runner port.SessionRunner
	// Reopen returns a new runner of the same owner and configuration, standing in for
	// the host process after a restart (re-attach).
	Reopen func(t *testing.T) port.SessionRunner
	// Image is the probe agent image (ProbeImage), already available to Runner.
	Image string
	// Leftovers lists what the adapter still holds for runID (as RunnerHarness's).
	Leftovers func(ctx context.Context, runID string) ([]string, error)
	// AgeHeartbeat moves a session's last heartbeat back by d (the adapter knows where
	// it keeps it), simulating a host that stopped caring d ago.
	AgeHeartbeat func(s port.Session, d time.Duration) error
}

// subtest is a named case of a suite.
type subtest struct {
	name string
	fn   func(*testing.T)
}

// runParallel runs each case as a parallel subtest of t.
func runParallel(t *testing.T, cases []subtest) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t)
		})
	}
}

// servePort is the loopback port the probe serves on inside sessions.
const servePort = 7000

// TestSessions runs the long-running sandbox conformance suite: lockdown of the
// session and of its execs, exec semantics, port exposure, files through the
// workspace, stop, wait, the log ring, re-attach, sweep by heartbeat and cleanup.
func TestSessions(t *testing.T, h SessionHarness) {
	if h.Runner == nil || h.Image == "" || h.Leftovers == nil || h.Reopen == nil || h.AgeHeartbeat == nil {
		t.Fatal("sandboxtest: SessionHarness needs Runner, Reopen, Image, Leftovers and AgeHeartbeat")
	}
	s := &sessionSuite{h: h}
	// One serving session shared by the cases that only look at it.
	shared := s.start(t, "shared", servePort)
	t.Run("group", func(t *testing.T) {
		for _, c := range []struct {
			name string
			fn   func(*testing.T, port.Session)
		}{
			{"ExecLockedDown", s.testExecLockdown},
			{"ExecSemantics", s.testExec},
			{"ExecTimeout", s.testExecTimeout},
			{"ExposeReachesLoopbackPort", s.testExpose},
			{"FilesThroughWorkspace", s.testFiles},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.fn(t, shared)
			})
		}
		runParallel(t, []subtest{
			{"WaitReportsExit", s.testWaitExit},
			{"LongestRunIDAndDuration", s.testLongestRunID},
			{"LogsRingCapped", s.testLogsCap},
			{"StopTermThenKill", s.testStopKill},
			{"LifetimeEnds", s.testLifetime},
			{"InvalidSpecCreatesNothing", s.testInvalid},
			{"ReattachAfterRestart", s.testReattach},
			{"SweepByHeartbeat", s.testSweep},
			{"DetachedOutputNeverBlocks", s.testDetachedOutput},
			{"ReadersByteExact", s.testReadersByteExact},
			{"FollowFromAnyPoint", s.testFollowFromAnyPoint},
		})
	})
	t.Run("StopCleansUp", func(t *testing.T) {
		res, err := shared.Stop(context.Background(), 5*time.Second)
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if res.ErrorCode != "" {
			t.Errorf("a stopped session reports error code %q", res.ErrorCode)
		}
		if _, err := shared.Exec(context.Background(), port.ExecSpec{Argv: []string{"/agent", "id"}}); !errors.Is(err, port.ErrClosed) {
			t.Errorf("Exec after Stop: %v, want ErrClosed", err)
		}
		s.noLeftovers(t, shared)
	})
}

type sessionSuite struct {
	h SessionHarness
}

func (s *sessionSuite) spec(name string, argv ...string) port.SessionSpec {
	return port.SessionSpec{RunSpec: port.RunSpec{
		RunID:  RunID("ps-" + strings.ToLower(name)),
		Image:  s.h.Image,
		Argv:   append([]string{"/agent"}, argv...),
		Limits: port.Limits{Timeout: 5 * time.Minute, MemoryBytes: 128 << 20},
		Env:    map[string]string{"SESSION_ENV": "from-spec"},
	}}
}

// start starts a serving session with a workspace, stopped at the end of the test.
func (s *sessionSuite) start(t *testing.T, name string, ports ...int) port.Session {
	t.Helper()
	spec := s.spec(name, "serve", fmt.Sprint(servePort))
	spec.WorkspaceDir = sessionWorkspace(t)
	spec.Expose = ports
	return s.startSpec(t, spec)
}

func (s *sessionSuite) startSpec(t *testing.T, spec port.SessionSpec) port.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := s.h.Runner.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		_, _ = sess.Stop(context.Background(), time.Second)
		s.noLeftovers(t, sess)
	})
	return sess
}

func sessionWorkspace(t *testing.T) string {
	dir, err := os.MkdirTemp("", "sess-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// The sandbox's user must write it.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (s *sessionSuite) noLeftovers(t *testing.T, sess port.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	left, err := s.h.Leftovers(ctx, sess.RunID())
	if err != nil {
		t.Errorf("listing leftovers of %s: %v", sess.RunID(), err)
	}
	if len(left) > 0 {
		t.Errorf("session %s left resources behind: %v", sess.RunID(), left)
	}
	if p, err := sess.Expose(servePort); err == nil {
		if _, err := os.Lstat(filepath.Dir(filepath.Dir(p))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("session directory of %s left behind (%v)", sess.RunID(), err)
		}
	}
}

func (s *sessionSuite) exec(t *testing.T, sess port.Session, es port.ExecSpec) *port.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sess.Exec(ctx, es)
	if err != nil {
		t.Fatalf("Exec %q: %v", es.Argv, err)
	}
	return res
}

// execAsUser checks that an exec in sess runs as the sandbox user; what starts the
// failure.
func (s *sessionSuite) execAsUser(t *testing.T, sess port.Session, what string) {
	t.Helper()
	res := s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "id"}})
	if strings.TrimSpace(string(res.Stdout)) != "uid=1001 gid=1001" {
		t.Errorf("%s: %q", what, res.Stdout)
	}
}

func (s *sessionSuite) testExecLockdown(t *testing.T, sess port.Session) {
	res := s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "net"}})
	if got := strings.Join(lines(res.Stdout), "|"); got != "iface lo|routes 0" {
		t.Errorf("network view from an exec = %q, want only loopback and no route", got)
	}
	res = s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "caps"}})
	for _, want := range []string{"CapEff: 0000000000000000", "CapBnd: 0000000000000000", "NoNewPrivs: 1"} {
		if !strings.Contains(string(res.Stdout), want) {
			t.Errorf("exec: missing %q in:\n%s", want, res.Stdout)
		}
	}
	res = s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent-suid", "euid"}})
	if got := strings.TrimSpace(string(res.Stdout)); got != "euid=1001 uid=1001" {
		t.Errorf("exec of a setuid-root binary ran with %q", got)
	}
	res = s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "write", "/etc/x", "y"}})
	if res.ExitCode == 0 {
		t.Error("exec wrote to the read-only root")
	}
}

func (s *sessionSuite) testExec(t *testing.T, sess port.Session) {
	var live bytes.Buffer
	res := s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "argv", "a b", "", "c;d"}, Stdout: &live})
	if got := string(res.Stdout); got != "[a b]\n[]\n[c;d]\n" || live.String() != got {
		t.Errorf("argv boundaries: result %q, live %q", got, live.String())
	}
	res = s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "env"}, Env: map[string]string{"EXTRA": "1"}})
	for _, want := range []string{"SESSION_ENV=from-spec", "EXTRA=1"} {
		if !strings.Contains(string(res.Stdout), want+"\n") {
			t.Errorf("exec env lacks %s:\n%s", want, res.Stdout)
		}
	}
	res = s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "echo", "out", "err"}})
	if string(res.Stdout) != "out" || string(res.Stderr) != "err" {
		t.Errorf("streams mixed: %q / %q", res.Stdout, res.Stderr)
	}
	res = s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "exit", "7"}})
	if res.ExitCode != 7 {
		t.Errorf("exit code %d, want 7", res.ExitCode)
	}
	res = s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "flood", "100000"}, OutputLimit: 1000})
	if len(res.Stdout) != 1000 || !res.StdoutTruncated {
		t.Errorf("capped output: %d bytes, truncated=%v", len(res.Stdout), res.StdoutTruncated)
	}
	if _, err := sess.Exec(context.Background(), port.ExecSpec{Argv: []string{"/nonexistent"}}); !errors.Is(err, port.ErrContainerFailed) {
		t.Errorf("exec of a missing command: %v, want ErrContainerFailed", err)
	}
	if _, err := sess.Exec(context.Background(), port.ExecSpec{}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("empty exec: %v, want ErrInvalidSpec", err)
	}
}

func (s *sessionSuite) testExecTimeout(t *testing.T, sess port.Session) {
	start := time.Now()
	res, err := sess.Exec(context.Background(), port.ExecSpec{Argv: []string{"/agent", "sleep", "60"}, Timeout: time.Second})
	if !errors.Is(err, port.ErrTimeout) {
		t.Fatalf("exec past its timeout: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the timeout took %v", d)
	}
	if res == nil {
		t.Error("no partial result with the timeout")
	}
	// The session is unharmed.
	s.execAsUser(t, sess, "after a timed-out exec")
}

func echoThrough(t *testing.T, sess port.Session, msg string) {
	t.Helper()
	// The socket exists once Start returns; the process may not listen yet.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := echoOnce(sess, msg)
		if err == nil && got == "echo:"+msg+"\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("through the exposed port: %q, %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func echoOnce(sess port.Session, msg string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := sess.Dial(ctx, servePort)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "%s\n", msg)
	return bufio.NewReader(c).ReadString('\n')
}

func (s *sessionSuite) testExpose(t *testing.T, sess port.Session) {
	echoThrough(t, sess, "ping")
	p, err := sess.Expose(servePort)
	if err != nil || !strings.HasSuffix(p, ".sock") {
		t.Errorf("Expose = %q, %v", p, err)
	}
	if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("exposed path is not a socket: %v %v", fi, err)
	}
	if _, err := sess.Expose(1234); !errors.Is(err, port.ErrNotFound) {
		t.Errorf("Expose of an unexposed port: %v, want ErrNotFound", err)
	}
	if _, err := sess.Dial(context.Background(), 1234); !errors.Is(err, port.ErrNotFound) {
		t.Errorf("Dial of an unexposed port: %v, want ErrNotFound", err)
	}
}

func (s *sessionSuite) testFiles(t *testing.T, sess port.Session) {
	if err := sess.WriteFile("in/hello.txt", []byte("from host"), 0o644); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	res := s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "cat", "/workspace/in/hello.txt"}})
	if string(res.Stdout) != "from host" {
		t.Errorf("the sandbox read %q (stderr %q)", res.Stdout, res.Stderr)
	}
	s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "write", "/workspace/out.txt", "from sandbox"}})
	got, err := sess.ReadFile("out.txt", 1<<20)
	if err != nil || string(got) != "from sandbox" {
		t.Errorf("ReadFile = %q, %v", got, err)
	}
	if _, err := sess.ReadFile("out.txt", 3); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("ReadFile over its cap: %v, want ErrInvalidSpec", err)
	}
	// A link planted in the workspace never leads the host out of it.
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("host only"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.plantLink(sess, "evil", secret); err != nil {
		t.Fatal(err)
	}
	if b, err := sess.ReadFile("evil", 1<<20); err == nil {
		t.Errorf("ReadFile followed a link out of the workspace: %q", b)
	}
	if err := sess.WriteFile("evil", []byte("overwritten"), 0o644); err == nil {
		if b, _ := os.ReadFile(secret); string(b) != "host only" {
			t.Errorf("WriteFile wrote through a link out of the workspace")
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "host only" {
		t.Errorf("the host file changed: %q", b)
	}
}

// plantLink makes name in the session's workspace a symbolic link to target, as a
// hostile agent would (the workspace is a host directory; the link is made from the
// host side because the probe image has no ln).
func (s *sessionSuite) plantLink(sess port.Session, name, target string) error {
	ws, ok := workspaceOf(sess)
	if !ok {
		return errors.New("cannot find the session's workspace")
	}
	return os.Symlink(target, filepath.Join(ws, name))
}

// workspaceOf finds the workspace directory through a marker file written with
// WriteFile.
func workspaceOf(sess port.Session) (string, bool) {
	marker := fmt.Sprintf(".marker-%d", time.Now().UnixNano())
	if err := sess.WriteFile(marker, []byte("m"), 0o644); err != nil {
		return "", false
	}
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), "sess-ws-*", marker))
	if len(matches) != 1 {
		return "", false
	}
	_ = os.Remove(matches[0])
	return filepath.Dir(matches[0]), true
}

func (s *sessionSuite) testWaitExit(t *testing.T) {
	sess := s.startSpec(t, s.spec("exit", "exit", "3"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sess.Wait(ctx)
	if err != nil || res == nil || res.ExitCode != 3 || res.ErrorCode != "" {
		t.Fatalf("Wait = %+v, %v; want exit 3 and no error", res, err)
	}
	select {
	case <-sess.Done():
	default:
		t.Error("Done not closed after Wait")
	}
	if _, err := sess.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "id"}}); !errors.Is(err, port.ErrClosed) {
		t.Errorf("Exec in an ended session: %v, want ErrClosed", err)
	}
}

// testLongestRunID starts a session with a run id of port.MaxRunIDLen bytes (the one
// rule RunOnce follows) whose process lives about a second, and requires its result to
// say how long it ran.
func (s *sessionSuite) testLongestRunID(t *testing.T) {
	spec := s.spec("longest", "sleep", "1")
	spec.RunID = LongestRunID("ps-longest")
	sess := s.startSpec(t, spec)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sess.Wait(ctx)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	if res.Duration < time.Second || res.Duration > 30*time.Second {
		t.Errorf("a session that slept 1 s reports a duration of %v", res.Duration)
	}
}

func (s *sessionSuite) testLogsCap(t *testing.T) {
	spec := s.spec("logs", "flood", "300000")
	spec.LogLimit = 4096
	sess := s.startSpec(t, spec)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sess.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	out, _ := sess.Logs()
	// The log keeps the newest 4 KiB; the result says exactly how much came before.
	if len(out) != 4096 || strings.Trim(string(out), "x") != "" || !res.StdoutTruncated || len(res.Stdout) != 4096 || res.StdoutDropped != 300000-4096 {
		t.Errorf("log: %d bytes kept, result %d truncated=%v dropped=%d", len(out), len(res.Stdout), res.StdoutTruncated, res.StdoutDropped)
	}
}

func (s *sessionSuite) testStopKill(t *testing.T) {
	sess := s.startSpec(t, s.spec("stubborn", "stubborn"))
	// Let it install its handler.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if out, _ := sess.Logs(); strings.Contains(string(out), "ignoring TERM") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stubborn process never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	res, err := sess.Stop(context.Background(), time.Second)
	d := time.Since(start)
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if res.ExitCode != 137 {
		t.Errorf("a process ignoring TERM ended with %d, want 137 (KILL after the grace)", res.ExitCode)
	}
	if d < time.Second || d > 30*time.Second {
		t.Errorf("Stop took %v with a 1s grace", d)
	}
	s.noLeftovers(t, sess)
	again, err := sess.Stop(context.Background(), time.Second)
	if err != nil || again.ExitCode != 137 {
		t.Errorf("second Stop = %+v, %v", again, err)
	}
}

func (s *sessionSuite) testLifetime(t *testing.T) {
	spec := s.spec("lifetime", "sleep", "120")
	spec.Limits.Timeout = 2 * time.Second
	sess := s.startSpec(t, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := sess.Wait(ctx)
	if !errors.Is(err, port.ErrTimeout) {
		t.Fatalf("a session past its lifetime: %v, want ErrTimeout", err)
	}
}

func (s *sessionSuite) testInvalid(t *testing.T) {
	for name, mut := range map[string]func(*port.SessionSpec){
		"port":    func(sp *port.SessionSpec) { sp.Expose = []int{70000} },
		"twice":   func(sp *port.SessionSpec) { sp.Expose = []int{80, 80} },
		"root":    func(sp *port.SessionSpec) { sp.User = "0" },
		"runid":   func(sp *port.SessionSpec) { sp.RunID = "../x" },
		"loglim":  func(sp *port.SessionSpec) { sp.LogLimit = -1 },
		"nomount": func(sp *port.SessionSpec) { sp.WorkspaceDir = "/nonexistent/ws" },
	} {
		spec := s.spec("invalid-"+name, "id")
		mut(&spec)
		if _, err := s.h.Runner.Start(context.Background(), spec); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
		if port.ValidateRunID(spec.RunID) == nil {
			if left, _ := s.h.Leftovers(context.Background(), spec.RunID); len(left) > 0 {
				t.Errorf("%s: an invalid spec left %v", name, left)
			}
		}
	}
}

func (s *sessionSuite) testReattach(t *testing.T) {
	sess := s.start(t, "reattach", servePort)
	echoThrough(t, sess, "before")
	if err := sess.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if _, err := sess.Wait(context.Background()); !errors.Is(err, port.ErrClosed) {
		t.Errorf("Wait on a detached handle: %v, want ErrClosed", err)
	}
	other := s.h.Reopen(t)
	if _, err := other.Attach(context.Background(), "agentsandbox-nope"); !errors.Is(err, port.ErrNotFound) {
		t.Errorf("Attach of an unknown id: %v, want ErrNotFound", err)
	}
	again, err := other.Attach(context.Background(), sess.ID())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if again.RunID() != sess.RunID() || again.ID() != sess.ID() {
		t.Errorf("re-attached handle is %s/%s, want %s/%s", again.ID(), again.RunID(), sess.ID(), sess.RunID())
	}
	echoThrough(t, again, "after")
	s.execAsUser(t, again, "exec after re-attach")
	if _, err := again.Stop(context.Background(), 2*time.Second); err != nil {
		t.Errorf("Stop after re-attach: %v", err)
	}
	s.noLeftovers(t, again)
}

func (s *sessionSuite) testSweep(t *testing.T) {
	sw, ok := s.h.Runner.(port.Sweeper)
	if !ok {
		t.Fatal("the session runner is not a Sweeper")
	}
	abandoned := s.start(t, "abandoned", servePort)
	alive := s.start(t, "alive", servePort)
	s.abandon(t, abandoned, alive)
	dry, err := sw.Sweep(context.Background(), port.SweepOptions{OlderThan: 10 * time.Minute, RunID: abandoned.RunID(), DryRun: true})
	if err != nil || !removedSandbox(dry.Removed) {
		t.Errorf("dry run = %+v, %v", dry, err)
	}
	s.sweepEach(t, sw, abandoned, alive, "session")
	back, err := s.h.Runner.Attach(context.Background(), alive.ID())
	if err != nil {
		t.Fatalf("the fresh session is gone: %v", err)
	}
	echoThrough(t, back, "still here")
	if _, err := back.Stop(context.Background(), 2*time.Second); err != nil {
		t.Error(err)
	}
}

// abandon detaches both sessions, then ages abandoned's heartbeat by an hour and
// refreshes alive's: a host that stopped caring for one of them.
func (s *sessionSuite) abandon(t *testing.T, abandoned, alive port.Session) {
	t.Helper()
	for _, x := range []port.Session{abandoned, alive} {
		if err := x.Detach(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.h.AgeHeartbeat(abandoned, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := alive.Heartbeat(); err != nil {
		t.Fatal(err)
	}
}

// sweepEach sweeps each session's run with a 10-minute grace: abandoned (see
// abandon) must go and leave nothing, alive must stay. what names the sessions in
// the messages.
func (s *sessionSuite) sweepEach(t *testing.T, sw port.Sweeper, abandoned, alive port.Session, what string) {
	t.Helper()
	for _, id := range []string{abandoned.RunID(), alive.RunID()} {
		rep, err := sw.Sweep(context.Background(), port.SweepOptions{OlderThan: 10 * time.Minute, RunID: id})
		if err != nil || len(rep.Errors) > 0 {
			t.Fatalf("Sweep: %+v, %v", rep, err)
		}
		if id == alive.RunID() && len(rep.Removed) > 0 {
			t.Errorf("Sweep removed a %s with a fresh heartbeat: %v", what, rep.Removed)
		}
		if id == abandoned.RunID() && !removedSandbox(rep.Removed) {
			t.Errorf("Sweep kept a %s whose heartbeat is an hour old: %v", what, rep.Removed)
		}
	}
	s.noLeftovers(t, abandoned)
}

// removedSandbox says whether a sweep report names a sandbox: a container, or a
// Kubernetes Pod.
func removedSandbox(removed []string) bool {
	return containsPrefix(removed, "container:") || containsPrefix(removed, "pod:")
}

func containsPrefix(ss []string, p string) bool {
	for _, s := range ss {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// testDetachedOutput: with no host attached, an agent writing 4 KiB every 20 ms
// (about 600 KiB, beyond the pipes' buffers and the log limit) never blocks; a host
// that attaches afterwards has the newest output, exactly the log's size of it up to
// the last line, and the exact count of what came before. About 5 s.
func (s *sessionSuite) testDetachedOutput(t *testing.T) {
	const lines = 150
	spec := s.spec("chatter", "chatter", port.WorkspacePath+"/progress", fmt.Sprint(lines))
	spec.WorkspaceDir = sessionWorkspace(t)
	spec.LogLimit = 128 << 10
	sess := s.startSpec(t, spec)
	if err := sess.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	progress := func() int {
		b, _ := os.ReadFile(filepath.Join(spec.WorkspaceDir, "progress"))
		n, _ := strconv.Atoi(string(b))
		return n
	}
	deadline := time.Now().Add(lines*20*time.Millisecond + 15*time.Second)
	for progress() < lines {
		if time.Now().After(deadline) {
			t.Fatalf("with no host attached the agent wrote %d of %d lines and then stopped: it blocks on output", progress(), lines)
		}
		time.Sleep(50 * time.Millisecond)
	}
	again, err := s.h.Reopen(t).Attach(context.Background(), sess.ID())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			again.Stop(context.Background(), time.Second)
		}
	}()
	// What the probe wrote, byte for byte.
	var want bytes.Buffer
	pad := strings.Repeat("x", 4096-len("line 000000 ")-1)
	for i := range lines {
		fmt.Fprintf(&want, "line %06d %s\n", i, pad)
	}
	want.WriteString("chatter done\n")
	var out []byte
	for end := time.Now().Add(30 * time.Second); ; {
		out, _ = again.Logs()
		if bytes.HasSuffix(out, []byte("chatter done\n")) || time.Now().After(end) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !bytes.Equal(out, want.Bytes()[want.Len()-spec.LogLimit:]) {
		t.Fatalf("after re-attach the log holds %d bytes ending %q; want the last %d written", len(out), clip(out[max(0, len(out)-200):]), spec.LogLimit)
	}
	stopped = true
	res, err := again.Stop(context.Background(), time.Second)
	if err != nil || res == nil {
		t.Fatalf("Stop: %+v, %v", res, err)
	}
	if !bytes.Equal(res.Stdout, out) || res.StdoutDropped != int64(want.Len()-spec.LogLimit) || !res.StdoutTruncated {
		t.Errorf("the result has %d bytes of stdout and counts %d dropped; want the log's %d and %d", len(res.Stdout), res.StdoutDropped, len(out), want.Len()-spec.LogLimit)
	}
}
