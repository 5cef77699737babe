package bridgeapi

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func newLog(t *testing.T, capacity int64) (string, *LogWriter, *os.File) {
	t.Helper()
	p := filepath.Join(t.TempDir(), LogStdout)
	if err := CreateLog(p, capacity, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := OpenLogWriter(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if c, err := LogCapacity(r); err != nil || c != capacity {
		t.Fatalf("LogCapacity = %d, %v", c, err)
	}
	return p, w, r
}

// TestLogRing: what a reader gets back across wraps: the bytes it asked for while the
// log holds them, and where the held part starts once they were overwritten.
func TestLogRing(t *testing.T) {
	_, w, r := newLog(t, 16)
	read := func(from int64) (int64, string, int64) {
		t.Helper()
		buf := make([]byte, 64)
		at, n, end, err := ReadLog(r, 16, from, buf)
		if err != nil {
			t.Fatal(err)
		}
		return at, string(buf[:n]), end
	}
	if at, got, end := read(0); at != 0 || got != "" || end != 0 {
		t.Fatalf("empty log: %d %q %d", at, got, end)
	}
	w.Write([]byte("0123456789"))
	if at, got, end := read(3); at != 3 || got != "3456789" || end != 10 {
		t.Errorf("read(3) = %d %q %d", at, got, end)
	}
	w.Write([]byte("abcdefghij")) // 20 bytes written: 4 overwritten
	if at, got, end := read(0); at != 4 || got != "456789abcdefghij" || end != 20 {
		t.Errorf("after a wrap: %d %q %d", at, got, end)
	}
	w.Write([]byte("ABCDEFGHIJKLMNOPQRSTUVWXYZ")) // larger than the ring
	if at, got, end := read(20); at != 30 || got != "KLMNOPQRSTUVWXYZ" || end != 46 {
		t.Errorf("after a write larger than the ring: %d %q %d", at, got, end)
	}
	buf := make([]byte, 5)
	if at, n, _, err := ReadLog(r, 16, 40, buf); err != nil || at != 40 || string(buf[:n]) != "UVWXY" {
		t.Errorf("a short buffer: %d %q %v", at, buf[:n], err)
	}
	// A second writer (the bridge after a restart) appends after what is there.
	p := r.Name()
	w2, err := OpenLogWriter(p)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	w2.Write([]byte("!"))
	if at, got, end := read(46); at != 46 || got != "!" || end != 47 {
		t.Errorf("reopened: %d %q %d", at, got, end)
	}
}

// streamByte is the byte at offset o of the stream the concurrent test writes.
func streamByte(o int64) byte { return byte(o*31 + o>>8 + o>>16) }

// TestLogConcurrentReaderNeverSeesAWrongByte: a writer much faster than a reader (a
// small ring, big writes) never makes the reader take a byte for one at another
// offset; what it skips, it is told (at > from), and data plus skipped is the stream.
func TestLogConcurrentReaderNeverSeesAWrongByte(t *testing.T) {
	const capacity, total = 4096, 8 << 20
	_, w, r := newLog(t, capacity)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		chunk := make([]byte, 0, 3000)
		for o := int64(0); o < total; {
			chunk = chunk[:0]
			for i := 0; i < cap(chunk) && o < total; i++ {
				chunk = append(chunk, streamByte(o))
				o++
			}
			if _, err := w.Write(chunk); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	buf := make([]byte, 1000)
	var from, got, skipped int64
	for from < total {
		at, n, _, err := ReadLog(r, capacity, from, buf)
		if err != nil {
			t.Fatal(err)
		}
		skipped += at - from
		for i := 0; i < n; i++ {
			if buf[i] != streamByte(at+int64(i)) {
				t.Fatalf("byte at %d is %d, want %d", at+int64(i), buf[i], streamByte(at+int64(i)))
			}
		}
		got += int64(n)
		from = at + int64(n)
	}
	wg.Wait()
	if got+skipped != total {
		t.Errorf("got %d + skipped %d != %d", got, skipped, total)
	}
	t.Logf("read %d bytes, told of %d skipped", got, skipped)
}

// TestLogCorrupt: a file that is not a log, a counter that does not match its
// complement, and an end before the reader's position are ErrLogCorrupt.
func TestLogCorrupt(t *testing.T) {
	p, w, r := newLog(t, 32)
	w.Write([]byte("hello"))
	buf := make([]byte, 8)
	if _, _, _, err := ReadLog(r, 32, 6, buf); !errors.Is(err, ErrLogCorrupt) {
		t.Errorf("a position after the end: %v", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteAt([]byte{9}, offHead)
	if _, _, _, err := ReadLog(r, 32, 0, buf); !errors.Is(err, ErrLogCorrupt) {
		t.Errorf("a torn head: %v", err)
	}
	f.WriteAt([]byte("NOTALOG!"), 0)
	if _, err := LogCapacity(r); !errors.Is(err, ErrLogCorrupt) {
		t.Errorf("bad magic: %v", err)
	}
	if _, err := OpenLogWriter(p); !errors.Is(err, ErrLogCorrupt) {
		t.Errorf("a writer on a bad file: %v", err)
	}
	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, bytes.Repeat([]byte{0}, 10), 0o600)
	sf, _ := os.Open(short)
	defer sf.Close()
	if _, err := LogCapacity(sf); !errors.Is(err, ErrLogCorrupt) {
		t.Errorf("a short file: %v", err)
	}
	if err := CreateLog(p, 32, 0o600); err == nil {
		t.Error("CreateLog replaced an existing file")
	}
	if err := CreateLog(filepath.Join(t.TempDir(), "x"), 0, 0o600); err == nil {
		t.Error("a zero capacity")
	}
}
