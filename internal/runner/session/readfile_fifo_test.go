package session

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// A FIFO the agent left in the workspace is refused at once, not waited on.
func TestReadFileRefusesFIFOWithoutBlocking(t *testing.T) {
	ws := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(ws, "pipe"), 0o666); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadFile(ws, "pipe", 0); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("err = %v, want ErrInvalidSpec (not a regular file)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFile blocked on a FIFO")
	}
	// No cap given: the default one holds.
	big := filepath.Join(ws, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(port.DefaultMaxReadFile + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := ReadFile(ws, "big", 0); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("sparse file over the default cap: err = %v, want ErrInvalidSpec", err)
	}
}
