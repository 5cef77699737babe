package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCheckUnwritable: a directory the init can create a file in is refused (and the
// probe file is not left there); one it cannot (here: missing) passes.
func TestCheckUnwritable(t *testing.T) {
	dir := t.TempDir()
	if err := checkUnwritable(dir); err == nil {
		t.Error("a writable directory passed")
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("the probe left %v", ents)
	}
	if err := checkUnwritable(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("a directory nothing can be created in: %v", err)
	}
}

// TestPumpFrames: what the command writes reaches the task's stream as frames that
// decode to exactly its bytes (any bytes, not only UTF-8), capped at max; a piece
// without a newline goes out while the command still runs (Docker would hold back
// a partial line); the rest of a flood is read and dropped, so the writer never
// blocks.
func TestPumpFrames(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out := &lines{got: make(chan string, 100)}
	done := make(chan struct{})
	const max = 100 << 10
	go func() {
		pump(r, &frames{w: out}, max)
		close(done)
	}()
	if _, err := w.Write([]byte("\xff\xfepartial")); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-out.got:
		if b, err := base64.StdEncoding.DecodeString(l); err != nil || string(b) != "\xff\xfepartial" {
			t.Errorf("first frame %q decodes to %q (%v)", l, b, err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a partial line was held back")
	}
	flood := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB, past the cap
	if _, err := w.Write(flood); err != nil {
		t.Fatal(err)
	}
	w.Close()
	<-done
	close(out.got)
	var all []byte
	for l := range out.got {
		if len(l) > 11<<10 {
			t.Errorf("a frame of %d bytes: Docker would split it", len(l))
		}
		b, err := base64.StdEncoding.DecodeString(l)
		if err != nil {
			t.Fatalf("frame %q: %v", l, err)
		}
		all = append(all, b...)
	}
	if want := flood[:max-len("\xff\xfepartial")]; !bytes.Equal(all, want) {
		t.Errorf("the frames carry %d bytes, want the first %d of the flood", len(all), len(want))
	}
}

// lines splits what is written into lines (frames come one Write each).
type lines struct{ got chan string }

func (l *lines) Write(p []byte) (int, error) {
	if len(p) == 0 || p[len(p)-1] != '\n' || bytes.Count(p, []byte("\n")) != 1 {
		return 0, fmt.Errorf("not one line: %q", p)
	}
	l.got <- string(p[:len(p)-1])
	return len(p), nil
}
