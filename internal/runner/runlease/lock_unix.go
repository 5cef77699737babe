//go:build unix

package runlease

import (
	"errors"
	"os"
	"syscall"
)

const syscallNoFollow = syscall.O_NOFOLLOW

// lock takes f's exclusive lock, held until f is closed (or the process dies).
func lock(f *os.File) error { return flock(f, syscall.LOCK_EX|syscall.LOCK_NB) }

// tryLock takes a shared lock on f if no holder has it: free reports that it did.
func tryLock(f *os.File) (free bool, err error) {
	return try(flock(f, syscall.LOCK_SH|syscall.LOCK_NB))
}

// tryLockExclusive is tryLock with an exclusive lock (Prune removes under it).
func tryLockExclusive(f *os.File) (free bool, err error) {
	return try(flock(f, syscall.LOCK_EX|syscall.LOCK_NB))
}

func try(err error) (bool, error) {
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

func unlock(f *os.File) { _ = flock(f, syscall.LOCK_UN) }

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
