//go:build !linux

package registrytest

import "syscall"

func dieWithParent() *syscall.SysProcAttr { return nil }
