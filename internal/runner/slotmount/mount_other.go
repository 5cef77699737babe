//go:build !linux

package slotmount

import (
	"errors"
	"os"
)

var errNoMounts = errors.New("warm pools need Linux mount propagation")

// Supported says this system has the mount propagation pools need.
const Supported = false

// MakeShared fails: no mount propagation here.
func MakeShared(string) error { return errNoMounts }

// Attach fails: no mount propagation here.
func Attach(string, string, string, bool) error { return errNoMounts }

// UnmountUnder does nothing here.
func UnmountUnder(string) error { return nil }

// RemoveDir removes an (unmounted) slot directory.
func RemoveDir(dir string) error { return os.RemoveAll(dir) }
