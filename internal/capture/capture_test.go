package capture

import "testing"

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
