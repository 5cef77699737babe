//go:build !linux

package containerd

import "errors"

var errNoMounts = errors.New("warm pools need Linux mount propagation")

func makeSharedDir(string) error                { return errNoMounts }
func attach(string, string, string, bool) error { return errNoMounts }
func unmountUnder(string) error                 { return nil }

const poolSupported = false
