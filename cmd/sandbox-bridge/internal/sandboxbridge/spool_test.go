package sandboxbridge

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// lockedBuffer is a bytes.Buffer safe for the spool's writer and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSpoolMarks: a spool with marks writes one before every 10 bytes of the child's
// output, at the offset, and the output without the marks is the child's.
func TestSpoolMarks(t *testing.T) {
	out := &lockedBuffer{}
	s, w, err := newSpool("stdout", out, 1<<20, 10)
	if err != nil {
		t.Fatal(err)
	}
	in := strings.Repeat("abcdefg", 5) // 35 bytes
	if _, err := w.WriteString(in); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if !s.flush(time.Now().Add(5 * time.Second)) {
		t.Fatal("the spool did not end")
	}
	want := in[:10] + fmt.Sprintf("%s10\x00", bridgeapi.OutputMark) + in[10:20] + fmt.Sprintf("%s20\x00", bridgeapi.OutputMark) + in[20:30] + fmt.Sprintf("%s30\x00", bridgeapi.OutputMark) + in[30:]
	if got := out.String(); got != want {
		t.Errorf("spool output %q, want %q", got, want)
	}
}
