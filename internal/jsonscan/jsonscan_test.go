package jsonscan

import "testing"

func TestEnds(t *testing.T) {
	for _, c := range []struct {
		in       string
		at       int
		str, val int
	}{
		{`"a\"b" x`, 0, 6, 6},
		{`{"k":[1,"]}",{"x":null}]} ,`, 0, -1, 25},
		{`[1, 2]`, 0, -1, 6},
		{`12.5e3,`, 0, -1, 6},
		{` true}`, 1, -1, 5},
		{`"open`, 0, -1, -1},
		{`{"a":"}`, 0, -1, -1},
		{`[[1]`, 0, -1, -1},
		{`x`, 1, -1, -1},
	} {
		if got := StringEnd([]byte(c.in), c.at); got != c.str {
			t.Errorf("StringEnd(%q, %d) = %d, want %d", c.in, c.at, got, c.str)
		}
		if got := ValueEnd([]byte(c.in), c.at); got != c.val {
			t.Errorf("ValueEnd(%q, %d) = %d, want %d", c.in, c.at, got, c.val)
		}
	}
	if got := Space([]byte(" \t\r\n x"), 0); got != 5 {
		t.Errorf("Space = %d, want 5", got)
	}
	if got := Space([]byte("  "), 0); got != 2 {
		t.Errorf("Space over only white space = %d, want 2", got)
	}
}
