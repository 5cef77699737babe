package sandboxtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// PauseHarness is what TestSessionPause needs from an adapter whose sessions are
// port.PausableSession.
type PauseHarness struct {
	SessionHarness
	// PID returns the host PID of a process of the session's sandbox (its init), so
	// the suite can read the sandbox's CPU time from its cgroup.
	PID func(s port.Session) (int, error)
}

// TestSessionPause runs the pause conformance suite: a paused sandbox makes no
// progress and uses no CPU, keeps its memory (an in-memory counter goes on from where
// it stopped), refuses execs and dials with ErrPaused while the workspace stays
// readable, resumes in milliseconds; its lifetime runs while paused by default and
// is held with StopClock (for the host and for the bridge inside); a paused session
// survives its host (re-attach, then resume), is stopped and swept like a running
// one, and leaves nothing behind.
func TestSessionPause(t *testing.T, h PauseHarness) {
	if h.Runner == nil || h.Image == "" || h.Leftovers == nil || h.Reopen == nil || h.AgeHeartbeat == nil || h.PID == nil {
		t.Fatal("sandboxtest: PauseHarness needs Runner, Reopen, Image, Leftovers, AgeHeartbeat and PID")
	}
	s := &pauseSuite{sessionSuite{h: h.SessionHarness}, h}
	runParallel(t, []subtest{
		{"FreezesKeepsMemoryResumes", s.testFreeze},
		{"ClockRunsWhilePaused", s.testClockRuns},
		{"StopClockHoldsTheLifetime", s.testStopClock},
		{"SurvivesHostRestart", s.testRestart},
		{"StopWhilePaused", s.testStop},
		{"SweepWhilePaused", s.testSweepPaused},
	})
}

type pauseSuite struct {
	sessionSuite
	ph PauseHarness
}

// startTicking starts a session whose process counts in memory every 20 ms,
// writing the count to the workspace file "progress", and waits for it to count.
func (s *pauseSuite) startTicking(t *testing.T, name string, timeout time.Duration) (port.Session, port.PausableSession, string) {
	t.Helper()
	spec := s.spec(name, "ticks", port.WorkspacePath+"/progress")
	spec.WorkspaceDir = sessionWorkspace(t)
	spec.Expose = []int{servePort}
	if timeout > 0 {
		spec.Limits.Timeout = timeout
	}
	sess := s.startSpec(t, spec)
	p, ok := sess.(port.PausableSession)
	if !ok {
		t.Fatalf("the session (%T) is not a port.PausableSession", sess)
	}
	waitProgress(t, spec.WorkspaceDir, 3)
	return sess, p, spec.WorkspaceDir
}

// progress reads the ticking process's count from the workspace.
func progress(t *testing.T, ws string) int {
	t.Helper()
	for i := 0; ; i++ {
		b, err := os.ReadFile(filepath.Join(ws, "progress"))
		n, cerr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && cerr == nil {
			return n
		}
		if i == 50 {
			t.Fatalf("progress file: %q %v", b, err)
		}
		time.Sleep(10 * time.Millisecond) // read while the file is replaced
	}
}

func waitProgress(t *testing.T, ws string, atLeast int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n := progress(t, ws); n >= atLeast {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process never counted to %d", atLeast)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cpuTime reads the CPU time of the cgroup of pid (cgroup v1's cpuacct, or v2's
// cpu.stat).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	var v2 string
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpuacct" {
				raw, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", parts[2], "cpuacct.usage"))
				if err != nil {
					return 0, err
				}
				ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
				return time.Duration(ns), err
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
	}
	if v2 == "" {
		return 0, errors.New("no cpuacct or unified cgroup for the process")
	}
	raw, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", v2, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(us) * time.Microsecond, err
		}
	}
	return 0, errors.New("no usage_usec in cpu.stat")
}

// tickNumbers returns the counts the process printed, in order.
func tickNumbers(out []byte) []int {
	var ns []int
	for _, l := range lines(out) {
		if v, ok := strings.CutPrefix(l, "tick "); ok {
			if n, err := strconv.Atoi(v); err == nil {
				ns = append(ns, n)
			}
		}
	}
	return ns
}

// assertContiguous fails unless the ticks run from their first to their last
// without a gap or a restart: the process's memory survived the pause.
func assertContiguous(t *testing.T, out []byte, past int) {
	t.Helper()
	ns := tickNumbers(out)
	if len(ns) == 0 || ns[len(ns)-1] <= past {
		t.Fatalf("no tick past %d in the log (%d ticks)", past, len(ns))
	}
	for i := 1; i < len(ns); i++ {
		if ns[i] != ns[i-1]+1 {
			t.Fatalf("tick %d follows tick %d: the count restarted or skipped", ns[i], ns[i-1])
		}
	}
}

func (s *pauseSuite) testFreeze(t *testing.T) {
	sess, p, ws := s.startTicking(t, "freeze", 0)
	pid, err := s.ph.PID(sess)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Now()
	if err := p.Pause(ctx, port.PauseOptions{}); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	pauseTook := time.Since(t0)
	st := p.PauseState()
	if !st.Paused || st.StopClock || st.Since.Before(t0) {
		t.Errorf("PauseState after Pause: %+v", st)
	}
	if err := p.Pause(ctx, port.PauseOptions{StopClock: true}); err != nil || p.PauseState().StopClock {
		t.Errorf("a second Pause: %v, %+v (want no error and the first pause's options)", err, p.PauseState())
	}
	before, cpu0 := progress(t, ws), mustCPU(t, pid)
	time.Sleep(time.Second)
	after, cpu1 := progress(t, ws), mustCPU(t, pid)
	if after != before {
		t.Errorf("the paused process counted from %d to %d in a second", before, after)
	}
	// A process counting every 20 ms uses some CPU each second; a frozen one none.
	if used := cpu1 - cpu0; used > 2*time.Millisecond {
		t.Errorf("the paused sandbox used %v of CPU in a second", used)
	}
	if _, err := sess.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "id"}}); !errors.Is(err, port.ErrPaused) {
		t.Errorf("Exec while paused: %v, want ErrPaused", err)
	}
	if _, err := sess.Dial(ctx, servePort); !errors.Is(err, port.ErrPaused) {
		t.Errorf("Dial while paused: %v, want ErrPaused", err)
	}
	if b, err := sess.ReadFile("progress", 0); err != nil || string(b) != strconv.Itoa(before) {
		t.Errorf("ReadFile while paused: %q %v, want %d", b, err, before)
	}
	t1 := time.Now()
	if err := p.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	resumeTook := time.Since(t1)
	t.Logf("pause %v, resume %v", pauseTook, resumeTook)
	if st := p.PauseState(); st.Paused || st.PausedFor != 0 {
		t.Errorf("PauseState after Resume: %+v", st)
	}
	if err := p.Resume(ctx); err != nil {
		t.Errorf("Resume of a running session: %v", err)
	}
	waitProgress(t, ws, before+5)
	s.execAsUser(t, sess, "exec after Resume")
	if pid2, err := s.ph.PID(sess); err != nil || pid2 != pid {
		t.Errorf("the sandbox's init is pid %d after the pause, %d before (%v)", pid2, pid, err)
	}
	out, _ := sess.Logs()
	assertContiguous(t, out, before+4)
	if _, err := sess.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(ctx, port.PauseOptions{}); !errors.Is(err, port.ErrClosed) {
		t.Errorf("Pause after Stop: %v, want ErrClosed", err)
	}
	s.noLeftovers(t, sess)
}

func mustCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	d, err := cpuTime(pid)
	if err != nil {
		t.Fatalf("the sandbox's CPU time: %v", err)
	}
	return d
}

// testClockRuns: by default the lifetime runs while paused; a session paused past
// its deadline ends then, as a timeout, thawed to be killed.
func (s *pauseSuite) testClockRuns(t *testing.T) {
	// Long enough that the three ticks startTicking waits for come first on a loaded
	// machine (at 3 s the session had ended before its pause).
	sess, p, _ := s.startTicking(t, "clockruns", 10*time.Second)
	if err := p.Pause(context.Background(), port.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := sess.Wait(ctx)
	if res == nil || res.ErrorCode != port.CodeTimeout || !errors.Is(err, port.ErrTimeout) {
		t.Fatalf("a session paused past its lifetime: %+v, %v; want a timeout", res, err)
	}
	if _, err := sess.Stop(context.Background(), time.Second); err != nil && !errors.Is(err, port.ErrTimeout) {
		t.Error(err)
	}
	s.noLeftovers(t, sess)
}

// testStopClock: with StopClock the lifetime does not run while paused: the host
// and the bridge inside (which would end the sandbox at its own deadline a little
// after the host's) both wait for the moved deadline.
func (s *pauseSuite) testStopClock(t *testing.T) {
	// Long enough that what follows the resume (a wait, 25 ticks, an exec) ends well
	// before the moved deadline on a loaded machine: with 4 s a slow start left too
	// little and the exec raced the session's end (runc: "read init-p: connection
	// reset by peer").
	const life = 8 * time.Second
	sess, p, ws := s.startTicking(t, "stopclock", life)
	ctx := context.Background()
	first := p.PauseState().Deadline
	if err := p.Pause(ctx, port.PauseOptions{StopClock: true}); err != nil {
		t.Fatal(err)
	}
	if !p.PauseState().StopClock {
		t.Errorf("PauseState: %+v", p.PauseState())
	}
	// Paused past the lifetime and the bridge's own deadline (the lifetime plus its
	// slack of 2 s).
	time.Sleep(life + 3*time.Second)
	select {
	case <-sess.Done():
		r, err := sess.Wait(ctx)
		t.Fatalf("a session paused with its clock stopped ended: %+v %v", r, err)
	default:
	}
	if err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	st := p.PauseState()
	if moved := st.Deadline.Sub(first); moved < life+3*time.Second || st.PausedFor < life+3*time.Second {
		t.Errorf("the deadline moved by %v (paused for %v), want at least %v", moved, st.PausedFor, life+3*time.Second)
	}
	// The bridge read the moved deadline: the process goes on past its old one
	// (which passed while it was frozen: without the moved deadline it would end it
	// at once).
	select {
	case <-sess.Done():
		r, err := sess.Wait(ctx)
		t.Fatalf("the session ended right after the resume (the bridge kept its old deadline?): %+v %v", r, err)
	case <-time.After(time.Second):
	}
	n := progress(t, ws)
	waitProgress(t, ws, n+25)
	res := s.exec(t, sess, port.ExecSpec{Argv: []string{"/agent", "id"}})
	if res.ExitCode != 0 {
		t.Errorf("exec after the resume: %+v", res)
	}
	// And it still ends at the moved deadline.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := sess.Wait(wctx)
	if r == nil || r.ErrorCode != port.CodeTimeout {
		t.Fatalf("at the moved deadline: %+v, %v; want a timeout", r, err)
	}
	if end := time.Now(); end.Before(st.Deadline) || end.After(st.Deadline.Add(10*time.Second)) {
		t.Errorf("ended at %v, the moved deadline is %v", end.Format(time.StampMilli), st.Deadline.Format(time.StampMilli))
	}
	_, _ = sess.Stop(ctx, time.Second)
	s.noLeftovers(t, sess)
}

// testRestart: a paused session survives its host: a new runner attaches to it,
// sees it paused with its options, and resumes it.
func (s *pauseSuite) testRestart(t *testing.T) {
	sess, p, ws := s.startTicking(t, "restart", 0)
	ctx := context.Background()
	if err := p.Pause(ctx, port.PauseOptions{StopClock: true}); err != nil {
		t.Fatal(err)
	}
	since := p.PauseState().Since
	before := progress(t, ws)
	if err := sess.Detach(); err != nil {
		t.Fatal(err)
	}
	again, err := s.h.Reopen(t).Attach(ctx, sess.ID())
	if err != nil {
		t.Fatalf("Attach to a paused session: %v", err)
	}
	t.Cleanup(func() { _, _ = again.Stop(context.Background(), time.Second) })
	p2, ok := again.(port.PausableSession)
	if !ok {
		t.Fatalf("an attached session (%T) is not a port.PausableSession", again)
	}
	st := p2.PauseState()
	if !st.Paused || !st.StopClock || !st.Since.Equal(since) {
		t.Errorf("the re-attached handle's state: %+v; want paused since %v with the clock stopped", st, since)
	}
	if _, err := again.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "id"}}); !errors.Is(err, port.ErrPaused) {
		t.Errorf("Exec on the re-attached paused session: %v, want ErrPaused", err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := progress(t, ws); n != before {
		t.Errorf("the process counted from %d to %d while paused across the host's restart", before, n)
	}
	if err := p2.Resume(ctx); err != nil {
		t.Fatalf("Resume after Attach: %v", err)
	}
	waitProgress(t, ws, before+5)
	s.execAsUser(t, again, "exec after resume")
	out, _ := again.Logs()
	// The re-attached handle sees output from before the pause again on Docker (its
	// log replays) and from the attach on containerd: contiguous either way.
	assertContiguous(t, out, before+4)
	if _, err := again.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	s.noLeftovers(t, again)
}

// testStop: Stop ends a paused session as a running one (thawed, TERM, removed).
func (s *pauseSuite) testStop(t *testing.T) {
	sess, p, _ := s.startTicking(t, "stop", 0)
	if err := p.Pause(context.Background(), port.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	res, err := sess.Stop(context.Background(), 5*time.Second)
	if err != nil || res == nil || res.ErrorCode != "" {
		t.Fatalf("Stop of a paused session: %+v, %v", res, err)
	}
	// The probe ends at SIGTERM: no wait for the grace's KILL.
	if d := time.Since(t0); d > 4*time.Second {
		t.Errorf("Stop of a paused session took %v: the TERM did not reach it", d)
	}
	s.noLeftovers(t, sess)
}

// testSweepPaused: a paused session is swept like a running one: kept while its
// heartbeat is fresh, removed (thawed to be killed) once abandoned.
func (s *pauseSuite) testSweepPaused(t *testing.T) {
	sw, ok := s.h.Runner.(port.Sweeper)
	if !ok {
		t.Fatal("the session runner is not a Sweeper")
	}
	ctx := context.Background()
	abandoned, pa, _ := s.startTicking(t, "pabandoned", 0)
	alive, pl, ws := s.startTicking(t, "palive", 0)
	for _, p := range []port.PausableSession{pa, pl} {
		if err := p.Pause(ctx, port.PauseOptions{StopClock: true}); err != nil {
			t.Fatal(err)
		}
	}
	s.abandon(t, abandoned, alive)
	s.sweepEach(t, sw, abandoned, alive, "paused session")
	back, err := s.h.Runner.Attach(ctx, alive.ID())
	if err != nil {
		t.Fatalf("the paused session with a fresh heartbeat is gone: %v", err)
	}
	pb := back.(port.PausableSession)
	if !pb.PauseState().Paused {
		t.Errorf("the kept session is not paused: %+v", pb.PauseState())
	}
	before := progress(t, ws)
	if err := pb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	waitProgress(t, ws, before+3)
	if _, err := back.Stop(ctx, 2*time.Second); err != nil {
		t.Error(err)
	}
	s.noLeftovers(t, back)
}
