package session

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// TestCounterMarks: marks are taken out wherever the writes split them, a mark ahead
// of what was received counts the gap (with a notice in the ring), a mark at what was
// received counts nothing, the bridge's own notices are counted, and bytes that only
// look like a mark's start pass on.
func TestCounterMarks(t *testing.T) {
	mark := func(n int) string { return fmt.Sprintf("%s%d\x00", bridgeapi.OutputMark, n) }
	cases := []struct {
		name    string
		in      string
		out     string // the ring, notices left out
		dropped int64
	}{
		{"none", "hello\n", "hello\n", 0},
		{"in step", "abcd" + mark(4) + "efgh" + mark(8) + "ij", "abcdefghij", 0},
		{"rotated out", "efgh" + mark(1000) + "ijkl" + mark(1004), "efghijkl", 996},
		{"later gap", mark(0) + "ab" + mark(10) + "cd", "abcd", 8},
		{"not a mark", bridgeapi.OutputMark + "x\x00yz", bridgeapi.OutputMark + "x\x00yz", 0},
		{"bridge notice", "ab\n" + bridgeapi.DroppedNotice + "500 bytes of stdout: no host was reading\ncd" + mark(504), "ab\ncd", 500},
	}
	for _, c := range cases {
		for _, size := range []int{1, 3, 7, 1 << 20} {
			r := NewRing(1 << 20)
			w := &counter{ring: r, name: "stdout"}
			for in := c.in; len(in) > 0; {
				n := min(size, len(in))
				if k, err := w.Write([]byte(in[:n])); k != n || err != nil {
					t.Fatalf("%s: Write = %d, %v", c.name, k, err)
				}
				in = in[n:]
			}
			got, _ := r.Bytes()
			var kept strings.Builder
			for _, l := range strings.SplitAfter(string(got), "\n") {
				if !strings.HasPrefix(l, bridgeapi.DroppedNotice) {
					kept.WriteString(l)
				}
			}
			out := strings.ReplaceAll(kept.String(), "\n\n", "\n")
			if c.name == "rotated out" || c.name == "later gap" {
				out = strings.ReplaceAll(kept.String(), "\n", "")
			}
			if out != c.out || w.counts() != c.dropped {
				t.Errorf("%s (writes of %d): ring %q, dropped %d; want %q, %d", c.name, size, got, w.counts(), c.out, c.dropped)
			}
		}
	}
}
