package capture

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestBufferCaps(t *testing.T) {
	b := &Buffer{Max: 5}
	for _, s := range []string{"ab", "cd", "efg", "h"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	got, trunc := b.Result()
	if string(got) != "abcde" || !trunc {
		t.Errorf("got %q truncated=%v", got, trunc)
	}
	exact := &Buffer{Max: 2}
	exact.Write([]byte("ab"))
	if got, trunc := exact.Result(); string(got) != "ab" || trunc {
		t.Errorf("exact fit: %q %v", got, trunc)
	}
}

func TestTailSurvivesTruncation(t *testing.T) {
	const notice = "\nNOTICE\n"
	b := &Buffer{Max: 10}
	_, _ = b.Write([]byte(strings.Repeat("x", 1000)))
	_, _ = b.Write([]byte(notice))
	out, trunc := b.Result()
	if !trunc || len(out) != 10 {
		t.Fatalf("result %q truncated=%v", out, trunc)
	}
	if _, ok := TrimNotice(out, b.Tail(), notice); !ok {
		t.Errorf("notice lost with a truncated stream; tail %q", b.Tail())
	}
	if got := len(b.Tail()); got != 256 {
		t.Errorf("tail is %d bytes, want 256", got)
	}
}

func TestTrimNotice(t *testing.T) {
	const notice = "\nNOTICE\n"
	b := &Buffer{Max: 100}
	for _, p := range []string{"abc", "\nNOT", "ICE\n"} { // split across writes
		_, _ = b.Write([]byte(p))
	}
	out, _ := b.Result()
	got, ok := TrimNotice(out, b.Tail(), notice)
	if !ok || string(got) != "abc" {
		t.Errorf("TrimNotice = %q, %v; want \"abc\", true", got, ok)
	}
	b2 := &Buffer{Max: 100}
	_, _ = b2.Write([]byte("NOTICE in the middle\nmore"))
	out2, _ := b2.Result()
	if got, ok := TrimNotice(out2, b2.Tail(), notice); ok || string(got) != string(out2) {
		t.Errorf("TrimNotice on a stream not ending in the notice = %q, %v", got, ok)
	}
}

type failAfter struct {
	got []string
	n   int
}

func (f *failAfter) Write(p []byte) (int, error) {
	f.got = append(f.got, string(p))
	if len(f.got) >= f.n {
		return 0, errFail
	}
	return len(p), nil
}

var errFail = errors.New("live writer failed")

func TestLiveGetsKeptBytesAsWritten(t *testing.T) {
	var live bytes.Buffer
	b := &Buffer{Max: 5, Live: &live}
	_, _ = b.Write([]byte("ab"))
	if live.String() != "ab" {
		t.Fatalf("live after the first write: %q", live.String())
	}
	_, _ = b.Write([]byte("cdefg"))
	_, _ = b.Write([]byte("h"))
	if live.String() != "abcde" {
		t.Errorf("live %q, want the capped %q", live.String(), "abcde")
	}
	out, _ := b.Result()
	_, _ = b.Write([]byte("late"))
	if live.String() != string(out) {
		t.Errorf("live %q differs from the result %q (or got bytes after Result)", live.String(), out)
	}
}

func TestLiveWriterDroppedOnError(t *testing.T) {
	f := &failAfter{n: 2}
	b := &Buffer{Max: 100, Live: f}
	for _, s := range []string{"a", "b", "c", "d"} {
		if n, err := b.Write([]byte(s)); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v: a failing live writer must not fail the capture", n, err)
		}
	}
	if strings.Join(f.got, "") != "ab" {
		t.Errorf("live writer got %q after failing, want only %q", f.got, "ab")
	}
	if out, _ := b.Result(); string(out) != "abcd" {
		t.Errorf("capture %q, want abcd", out)
	}
}
