//go:build !linux

package bridge

import "errors"

func setSubreaper() error {
	return errors.New("child subreapers need Linux")
}
