package capture

import (
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
