package countio

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// shortWriter takes at most max bytes, then fails.
type shortWriter struct{ max int }

func (s *shortWriter) Write(p []byte) (int, error) {
	if len(p) > s.max {
		return s.max, errors.New("short")
	}
	return len(p), nil
}

func TestWriterCountsWhatWasTaken(t *testing.T) {
	var buf bytes.Buffer
	w := &Writer{W: &buf}
	for _, s := range []string{"abc", "", "defgh"} {
		if _, err := io.WriteString(w, s); err != nil {
			t.Fatal(err)
		}
	}
	if w.N != 8 || buf.String() != "abcdefgh" {
		t.Errorf("N = %d, wrote %q; want 8, abcdefgh", w.N, buf.String())
	}
	s := &Writer{W: &shortWriter{max: 2}}
	if n, err := s.Write([]byte("hello")); n != 2 || err == nil || s.N != 2 {
		t.Errorf("short write: n=%d err=%v N=%d; want 2, an error, 2", n, err, s.N)
	}
}

func TestWriterCountsATeeReader(t *testing.T) {
	n := &Writer{W: io.Discard}
	got, err := io.ReadAll(io.LimitReader(io.TeeReader(strings.NewReader("0123456789"), n), 7))
	if err != nil || string(got) != "0123456" || n.N != 7 {
		t.Errorf("read %q (%v), N = %d; want 0123456, 7", got, err, n.N)
	}
}
