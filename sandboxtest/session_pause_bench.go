package sandboxtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/port"
)

// RawFreezer is the runtime's own pause and resume of a session's sandbox, called
// directly through its client: the baseline BenchmarkPause compares against.
type RawFreezer func(s port.Session) (freeze, thaw func(context.Context) error)

// BenchmarkPause measures a session's Pause and Resume and the round trip (Pause
// then Resume, back to back), alternated in one loop with the runtime's raw calls on
// the same sandbox (raw), and reports their p50/p95/p99 and the ratios. Each
// iteration checks the sandbox ran between pauses (its count went on), untimed.
// Goal: pause → resume p50 <= 50 ms.
func BenchmarkPause(b *testing.B, r port.SessionRunner, image string, raw RawFreezer) {
	ctx := context.Background()
	ws, err := benchWorkspace()
	if err != nil {
		b.Fatal(err)
	}
	defer removeAll(ws)
	spec := port.SessionSpec{RunSpec: port.RunSpec{
		RunID: RunID("bench-pause"), Image: image, WorkspaceDir: ws,
		Argv:   []string{"/agent", "ticks", port.WorkspacePath + "/progress"},
		Limits: port.Limits{Timeout: time.Hour, MemoryBytes: 128 << 20},
	}}
	sess, err := r.Start(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Stop(context.Background(), time.Second)
	p := sess.(port.PausableSession)
	freeze, thaw := raw(sess)
	var pause, resume, both, rawPause, rawResume, rawBoth []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := p.Pause(ctx, port.PauseOptions{}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := p.Resume(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		pause, resume, both = append(pause, t1.Sub(t0)), append(resume, t2.Sub(t1)), append(both, t2.Sub(t0))

		t0 = time.Now()
		if err := freeze(ctx); err != nil {
			b.Fatal(err)
		}
		t1 = time.Now()
		if err := thaw(ctx); err != nil {
			b.Fatal(err)
		}
		t2 = time.Now()
		rawPause, rawResume, rawBoth = append(rawPause, t1.Sub(t0)), append(rawResume, t2.Sub(t1)), append(rawBoth, t2.Sub(t0))

		b.StopTimer()
		if err := ranSince(ws); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	benchutil.Report(b, "pause", pause)
	benchutil.Report(b, "resume", resume)
	p50 := benchutil.Report(b, "pause-resume", both)
	benchutil.Report(b, "raw-pause", rawPause)
	benchutil.Report(b, "raw-resume", rawResume)
	raw50 := benchutil.Report(b, "raw-pause-resume", rawBoth)
	benchutil.Ratio(b, "pause-resume/raw", p50, raw50)
}

func benchWorkspace() (string, error) {
	dir, err := os.MkdirTemp("", "bench-pause-ws-")
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o777)
}

func removeAll(dir string) { _ = os.RemoveAll(dir) }

// ranSince waits until the ticking process's count moves: it runs.
func ranSince(ws string) error {
	read := func() string {
		b, _ := os.ReadFile(filepath.Join(ws, "progress"))
		return string(b)
	}
	first := read()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if now := read(); now != "" && now != first {
			return nil
		}
	}
	return errors.New("the sandbox does not run after the resume")
}
