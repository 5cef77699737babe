//go:build !linux

package ociregistry

import "syscall"

func dieWithParent() *syscall.SysProcAttr { return nil }
