package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// testLog makes a session directory with a log of limit bytes per stream and returns
// it with the bridge's writers.
func testLog(t *testing.T, limit int) (dir string, out, errw *bridgeapi.LogWriter) {
	t.Helper()
	dir, err := CreateDir(t.TempDir(), "s1", "1001:1001", limit)
	if err != nil {
		t.Fatal(err)
	}
	if out, err = bridgeapi.OpenLogWriter(filepath.Join(LogDir(dir), bridgeapi.LogStdout)); err != nil {
		t.Fatal(err)
	}
	if errw, err = bridgeapi.OpenLogWriter(filepath.Join(LogDir(dir), bridgeapi.LogStderr)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close(); errw.Close() })
	return dir, out, errw
}

// readAll follows r to its end, and returns each stream's bytes and what it was told
// it missed.
func readAll(t *testing.T, r port.LogReader) (out, errb []byte, dropped port.LogPosition) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		c, err := r.Next(ctx)
		if err == io.EOF {
			return out, errb, dropped
		}
		if err != nil {
			t.Fatal(err)
		}
		if c.Stream == port.LogStdout {
			out, dropped.Stdout = append(out, c.Data...), dropped.Stdout+c.Dropped
		} else {
			errb, dropped.Stderr = append(errb, c.Data...), dropped.Stderr+c.Dropped
		}
	}
}

// TestFollowAcrossRingWraps: a writer of many times the log's size, lines repeated
// word for word among them; readers that keep up get every byte exactly once, in
// order, across the wraps; the snapshot's end followed on gives the rest with nothing
// lost or repeated; a reader that starts late is told exactly what it missed.
func TestFollowAcrossRingWraps(t *testing.T) {
	const limit = 4096
	dir, out, errw := testLog(t, limit)
	done := make(chan struct{})
	var want bytes.Buffer
	for i := range 3000 {
		if i%3 == 0 {
			fmt.Fprintf(&want, "tick %d\n", i)
		} else {
			want.WriteString("same line again\n") // a follower must not swallow repeats
		}
	}
	readers := make([]port.LogReader, 3)
	for i := range readers {
		r, err := newLogReader(dir, limit, port.FollowOptions{}, done, func() bool { return false })
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		readers[i] = r
	}
	got := make([][]byte, len(readers))
	var wg sync.WaitGroup
	for i, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, e, d := readAll(t, r)
			if len(e) != 8 || d != (port.LogPosition{}) {
				t.Errorf("reader %d: stderr %q, dropped %+v", i, e, d)
			}
			got[i] = o
		}()
	}
	// The writer waits for the slowest reader before overwriting what it has not
	// read: a test of the readers, not of a race with them.
	slowest := func() int64 {
		m := int64(1 << 62)
		for _, r := range readers {
			m = min(m, r.Position().Stdout)
		}
		return m
	}
	b := want.Bytes()
	for off := 0; off < len(b); {
		n := min(700, len(b)-off)
		for int64(off+n)-slowest() > limit {
			time.Sleep(time.Millisecond)
		}
		out.Write(b[off : off+n])
		off += n
	}
	errw.Write([]byte("err-tail"))
	// A snapshot now, then a follow from its end: the two together are the stream.
	l, err := openLog(dir, limit)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := l.snapshot()
	l.Close()
	if err != nil || snap.End.Stdout != int64(len(b)) || snap.Start.Stdout != int64(len(b)-limit) || !bytes.Equal(snap.Stdout, b[len(b)-limit:]) {
		t.Fatalf("snapshot %+v %v", snap.Start, err)
	}
	after, err := newLogReader(dir, limit, port.FollowOptions{From: snap.End}, done, func() bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	out.Write([]byte("the last line\n"))
	close(done)
	wg.Wait()
	want.WriteString("the last line\n")
	for i, g := range got {
		if !bytes.Equal(g, want.Bytes()) {
			t.Errorf("reader %d got %d bytes, not the %d written", i, len(g), want.Len())
		}
	}
	if o, _, d := readAll(t, after); string(o) != "the last line\n" || d.Stdout != 0 {
		t.Errorf("after the snapshot: %q, dropped %+v", o, d)
	}
	// A reader from the start, after all that: the log's last limit bytes, and the
	// exact count of what came before.
	late, err := newLogReader(dir, limit, port.FollowOptions{}, done, func() bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	o, e, d := readAll(t, late)
	if int64(len(o))+d.Stdout != int64(want.Len()) || !bytes.HasSuffix(want.Bytes(), o) || len(o) != limit || string(e) != "err-tail" {
		t.Errorf("a late reader: %d bytes + %d dropped, want %d in all", len(o), d.Stdout, want.Len())
	}
	// From now: nothing more, and the end.
	now, err := newLogReader(dir, limit, port.FollowOptions{Now: true}, done, func() bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	defer now.Close()
	if o, e, _ := readAll(t, now); len(o)+len(e) != 0 || now.Position().Stdout != int64(want.Len()) {
		t.Errorf("from now: %q %q at %+v", o, e, now.Position())
	}
}

// TestFollowEndsAndDetach: Next waits for output, ends with io.EOF once the session
// ended and all was read, returns ctx's error when ctx ends, and ErrClosed when the
// handle was detached; a corrupt log stops it with ErrLogCorrupt.
func TestFollowEndsAndDetach(t *testing.T) {
	dir, out, _ := testLog(t, 64)
	done := make(chan struct{})
	var detached atomic.Bool
	r, err := newLogReader(dir, 64, port.FollowOptions{}, done, detached.Load)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no output yet: %v", err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		out.Write([]byte("late"))
	}()
	c, err := r.Next(context.Background())
	if err != nil || string(c.Data) != "late" || c.Offset != 0 || c.Stream != port.LogStdout {
		t.Fatalf("waited for: %+v %v", c, err)
	}
	detached.Store(true)
	close(done)
	if _, err := r.Next(context.Background()); !errors.Is(err, port.ErrClosed) {
		t.Errorf("after Detach: %v", err)
	}
	if _, err := newLogReader(dir, 128, port.FollowOptions{}, done, detached.Load); !errors.Is(err, port.ErrLogCorrupt) {
		t.Errorf("another capacity: %v", err)
	}
	if _, err := newLogReader(dir, 64, port.FollowOptions{From: port.LogPosition{Stdout: 99}}, done, detached.Load); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a position past the end: %v", err)
	}
	// The sandbox rewrites its log's end backwards under a reader.
	detached.Store(false)
	live := make(chan struct{})
	r2, err := newLogReader(dir, 64, port.FollowOptions{Now: true}, live, detached.Load)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	f, err := os.OpenFile(filepath.Join(LogDir(dir), bridgeapi.LogStdout), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var zero [16]byte
	binary.LittleEndian.PutUint64(zero[8:], ^uint64(0))
	if _, err := f.WriteAt(zero[:], 32); err != nil { // head = 0
		t.Fatal(err)
	}
	if _, err := r2.Next(context.Background()); !errors.Is(err, port.ErrLogCorrupt) {
		t.Errorf("an end that went back: %v", err)
	}
}
