package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// LinesOutput is what the probe's `lines N MS` command writes on stdout and stderr: N
// lines on stdout, every third unique and the others identical, one on stderr every
// tenth, MS milliseconds apart, then "lines done" (the probe's own copy is in
// probe/lines.go). For tests that check a session's output byte for byte.
func LinesOutput(n int) (stdout, stderr []byte) {
	var o, e bytes.Buffer
	for i := range n {
		if i%3 == 0 {
			fmt.Fprintf(&o, "tick %d\n", i)
		} else {
			o.WriteString("the same line again\n")
		}
		if i%10 == 9 {
			fmt.Fprintf(&e, "err %d\n", i)
		}
	}
	o.WriteString("lines done\n")
	return o.Bytes(), e.Bytes()
}

// followed is what a LogReader read to its end.
type followed struct {
	stdout, stderr []byte
	dropped        port.LogPosition
	err            error
}

// followAll reads r to io.EOF (or ctx's end) in the background.
func followAll(ctx context.Context, r port.LogReader) <-chan followed {
	c := make(chan followed, 1)
	go func() {
		defer r.Close()
		var f followed
		for {
			ch, err := r.Next(ctx)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					f.err = err
				}
				c <- f
				return
			}
			if ch.Stream == port.LogStdout {
				f.stdout, f.dropped.Stdout = append(f.stdout, ch.Data...), f.dropped.Stdout+ch.Dropped
			} else {
				f.stderr, f.dropped.Stderr = append(f.stderr, ch.Data...), f.dropped.Stderr+ch.Dropped
			}
		}
	}()
	return c
}

func follower(t *testing.T, s port.Session) port.LogFollower {
	t.Helper()
	lf, ok := s.(port.LogFollower)
	if !ok {
		t.Fatalf("the session handle (%T) is no port.LogFollower", s)
	}
	return lf
}

// startLines starts a session whose probe writes n lines 4 ms apart into a log of
// limit bytes (its last line after the barrier file, when one is named), and returns
// it with what the lines are on stdout and stderr.
func (s *sessionSuite) startLines(t *testing.T, name string, n, limit int, barrier ...string) (port.Session, []byte, []byte) {
	t.Helper()
	spec := s.spec(name, append([]string{"lines", fmt.Sprint(n), "4"}, barrier...)...)
	spec.LogLimit = limit
	wantOut, wantErr := LinesOutput(n)
	return s.startSpec(t, spec), wantOut, wantErr
}

// testReadersByteExact: any number of readers see every byte of a session's output,
// whoever else reads it, across wraps of its log: the handle that started it, a
// handle of another host process (Attach) while that process also execs in the
// session (what `sandboxctl exec` does), and a third from a second Attach. The agent
// writes about three times its 4 KiB log, repeated lines among its lines, while they
// read; each gets exactly what it wrote, and the result keeps the log's tail with
// an exact count of the rest. About 3 s.
func (s *sessionSuite) testReadersByteExact(t *testing.T) {
	const n, limit = 600, 4096
	// The lines end only once the execs below are done: on a loaded machine the
	// execs can take longer than the 2.4 s of lines.
	const barrier = "/tmp/readers-done"
	sess, wantOut, wantErr := s.startLines(t, "readers", n, limit, barrier)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(lf port.LogFollower) <-chan followed {
		t.Helper()
		r, err := lf.Follow(ctx, port.FollowOptions{})
		if err != nil {
			t.Fatalf("Follow: %v", err)
		}
		return followAll(ctx, r)
	}
	host := start(follower(t, sess))
	other, err := s.h.Reopen(t).Attach(ctx, sess.ID())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	reattached := start(follower(t, other))
	third, err := s.h.Reopen(t).Attach(ctx, sess.ID())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	logsF := start(follower(t, third))
	// Execs from the other host while everyone reads (the session's output is not
	// theirs to take).
	for i := range 3 {
		res := s.exec(t, other, port.ExecSpec{Argv: []string{"/agent", "echo", fmt.Sprintf("exec-%d", i), ""}})
		if string(res.Stdout) != fmt.Sprintf("exec-%d", i) {
			t.Errorf("exec %d: %q", i, res.Stdout)
		}
	}
	s.exec(t, other, port.ExecSpec{Argv: []string{"/agent", "write", barrier, "x"}})
	for name, c := range map[string]<-chan followed{"the starting host": host, "a re-attached host": reattached, "a third reader": logsF} {
		f := <-c
		if f.err != nil {
			t.Errorf("%s: %v", name, f.err)
			continue
		}
		if !bytes.Equal(f.stdout, wantOut) || !bytes.Equal(f.stderr, wantErr) || f.dropped != (port.LogPosition{}) {
			t.Errorf("%s read %d+%d bytes (dropped %+v), want exactly the %d+%d written; stdout ends %q", name, len(f.stdout), len(f.stderr), f.dropped, len(wantOut), len(wantErr), tail(f.stdout, 60))
		}
	}
	res, err := sess.Wait(ctx)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	if !bytes.Equal(res.Stdout, wantOut[len(wantOut)-limit:]) || !res.StdoutTruncated || res.StdoutDropped != int64(len(wantOut)-limit) {
		t.Errorf("result: %d bytes of stdout, truncated %v, dropped %d; want the last %d and %d dropped", len(res.Stdout), res.StdoutTruncated, res.StdoutDropped, limit, len(wantOut)-limit)
	}
	if !bytes.Equal(res.Stderr, wantErr) || res.StderrDropped != 0 {
		t.Errorf("result stderr: %q dropped %d", res.Stderr, res.StderrDropped)
	}
	for _, h := range []port.Session{other, third} {
		_ = h.Detach()
	}
}

// testFollowFromAnyPoint: a snapshot and a follow from its end are the output, no byte
// lost or repeated; a follow from now starts at the end; a reader far behind (it
// starts after the log wrapped) is told exactly how many bytes it missed; a handle's
// readers end with ErrClosed when it is detached. About 3 s.
func (s *sessionSuite) testFollowFromAnyPoint(t *testing.T) {
	const n, limit = 500, 2048
	sess, wantOut, wantErr := s.startLines(t, "follow", n, limit)
	lf := follower(t, sess)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Some output first, then a snapshot and a follow from its end.
	for {
		snap, err := lf.LogSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		if snap.End.Stdout > 500 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	snap, err := lf.LogSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap.Stdout, wantOut[snap.Start.Stdout:snap.End.Stdout]) || snap.End.Stdout-snap.Start.Stdout != int64(len(snap.Stdout)) {
		t.Fatalf("a snapshot [%d, %d) is not the output there", snap.Start.Stdout, snap.End.Stdout)
	}
	r, err := lf.Follow(ctx, port.FollowOptions{From: snap.End})
	if err != nil {
		t.Fatal(err)
	}
	rest := followAll(ctx, r)
	now, err := lf.Follow(ctx, port.FollowOptions{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	nowAt := now.Position()
	fromNow := followAll(ctx, now)
	if _, err := sess.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	f := <-rest
	if f.err != nil || !bytes.Equal(append(append([]byte(nil), snap.Stdout...), f.stdout...), wantOut[snap.Start.Stdout:]) || f.dropped != (port.LogPosition{}) {
		t.Errorf("snapshot + follow from its end: %d + %d bytes, dropped %+v, %v; want the output from %d", len(snap.Stdout), len(f.stdout), f.dropped, f.err, snap.Start.Stdout)
	}
	if f := <-fromNow; f.err != nil || !bytes.Equal(f.stdout, wantOut[nowAt.Stdout:]) || !bytes.Equal(f.stderr, wantErr[nowAt.Stderr:]) {
		t.Errorf("from now (%+v): %d bytes, %v", nowAt, len(f.stdout), f.err)
	}
	// After the end, from the start: the log's last limit bytes, and the count of the rest.
	late, err := lf.Follow(ctx, port.FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f = <-followAll(ctx, late)
	if f.err != nil || int64(len(f.stdout))+f.dropped.Stdout != int64(len(wantOut)) || !bytes.HasSuffix(wantOut, f.stdout) || len(f.stdout) != limit {
		t.Errorf("a late reader: %d bytes and %d dropped (%v), want the last %d of %d", len(f.stdout), f.dropped.Stdout, f.err, limit, len(wantOut))
	}

	// A detached handle's readers end.
	other := s.start(t, "follow-detach")
	r2, err := follower(t, other).Follow(ctx, port.FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := followAll(ctx, r2)
	if err := other.Detach(); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-got:
		if !errors.Is(f.err, port.ErrClosed) {
			t.Errorf("a reader of a detached handle ended with %v, want ErrClosed", f.err)
		}
	case <-time.After(30 * time.Second):
		t.Error("a reader of a detached handle did not end")
	}
	again, err := s.h.Reopen(t).Attach(ctx, other.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Stop(ctx, time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// tail is the end of b, for messages.
func tail(b []byte, n int) string {
	return strings.ToValidUTF8(string(b[max(0, len(b)-n):]), "?")
}
