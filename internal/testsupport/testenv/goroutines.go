package testenv

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Goroutines returns the live goroutines (id → stack) that have a frame in one of the
// given package paths (for example "github.com/agentsandbox/sandbox/openclaw/gateway.").
// It names what a component owns, so a leak check can follow those goroutines by
// identity instead of comparing machine-wide counts: the process also holds HTTP
// keep-alives, other tests' helpers and the runtime's own goroutines.
func Goroutines(pkgs ...string) map[int]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[int]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		head, _, _ := bytes.Cut(g, []byte("\n"))
		f := strings.Fields(string(head)) // "goroutine 12 [select]:"
		if len(f) < 2 || f[0] != "goroutine" {
			continue
		}
		id, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		for _, p := range pkgs {
			if bytes.Contains(g, []byte(p)) {
				out[id] = string(g)
				break
			}
		}
	}
	return out
}

// WaitGone fails t unless every goroutine in gone has ended within d; the message
// lists the stacks of those still alive.
func WaitGone(t testing.TB, gone map[int]string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var alive []string
		now := Goroutines("")
		for id := range gone {
			if s, ok := now[id]; ok {
				alive = append(alive, s)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines still alive after %v:\n%s", len(alive), d, strings.Join(alive, "\n\n"))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
