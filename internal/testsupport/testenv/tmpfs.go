package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// SmallDisk mounts a tmpfs of size bytes on a fresh directory, unmounted (lazily, so
// a process still using it cannot keep it) when t ends: a disk a test can fill (Fill)
// without touching the machine's. It needs root (CAP_SYS_ADMIN), as the runtimes do.
func SmallDisk(t testing.TB, size int64) string {
	t.Helper()
	dir := ShortDir(t, "disk")
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mounting a %d-byte tmpfs (the test needs root): %v", size, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// Filler takes the free space of a file system (Fill) and gives it back (Free).
type Filler struct {
	path string
}

// Fill writes a file under dir until the file system has no free block left, and
// returns it.
func Fill(t testing.TB, dir string) *Filler {
	t.Helper()
	f := &Filler{path: filepath.Join(dir, "filler")}
	w, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	buf := make([]byte, 64<<10)
	for n := len(buf); n > 0; n /= 2 {
		for {
			if _, err := w.Write(buf[:n]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	return f
}

// Free removes the filler.
func (f *Filler) Free() error { return os.Remove(f.path) }
