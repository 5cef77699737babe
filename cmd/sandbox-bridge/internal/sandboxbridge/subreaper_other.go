//go:build !linux

package sandboxbridge

import "errors"

func setSubreaper() error {
	return errors.New("child subreapers need Linux")
}

// SetUndumpable is a no-op off Linux.
func SetUndumpable() error { return nil }
