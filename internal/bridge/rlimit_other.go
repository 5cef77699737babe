//go:build !linux

package bridge

func openFilesLimit() uint64 { return 0 }
