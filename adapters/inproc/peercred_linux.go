//go:build linux

package inproc

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

const peerCredSupported = true

// peerUID returns the uid of the process on the other end of a unix socket connection,
// as the kernel recorded it at connect time (SO_PEERCRED), so the peer cannot lie.
func peerUID(c net.Conn) (int, error) {
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
