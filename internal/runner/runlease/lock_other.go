//go:build !unix

package runlease

import (
	"errors"
	"os"
)

const syscallNoFollow = 0

var errNoLocks = errors.New("runlease: file locks are not supported here")

// Without flock a lease cannot be checked: it counts as held (see Held).
func lock(*os.File) error                     { return nil }
func tryLock(*os.File) (bool, error)          { return false, errNoLocks }
func tryLockExclusive(*os.File) (bool, error) { return false, errNoLocks }
func unlock(*os.File)                         {}
