//go:build linux

// Package peercred reads the credentials the kernel recorded for the other end of a
// unix socket connection (SO_PEERCRED): what the peer cannot lie about.
package peercred

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Supported says whether UID works on this platform.
const Supported = true

// UID returns the uid of the process on the other end of a unix socket connection,
// as the kernel recorded it at connect time.
func UID(c net.Conn) (int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, fmt.Errorf("peer credentials: %T is not a unix socket", c)
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return -1, err
	}
	var (
		cred *unix.Ucred
		cerr error
	)
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, fmt.Errorf("peer credentials: %w", cerr)
	}
	return int(cred.Uid), nil
}
