package testenv

import (
	"bytes"
	"net"
	"os"
	"sync"
	"testing"

	"github.com/agentsandbox/sandbox/internal/localcluster"
)

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers: a log
// sink or an output a test scans while the writer runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ShortDir is a temporary directory with a short path (unix socket paths are
// limited to about 100 bytes, which t.TempDir can exceed), removed when t ends.
func ShortDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// FreePort is a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreePorts returns n distinct loopback TCP ports that were free a moment ago
// (localcluster.FreePorts).
func FreePorts(n int) ([]int, error) { return localcluster.FreePorts(n) }

// TailFile returns the last n lines of the file at path, or the error reading it
// (localcluster.TailFile).
func TailFile(path string, n int) string { return localcluster.TailFile(path, n) }
