package proxyd

import (
	"fmt"
	"log/slog"
	"net"
	"slices"

	"golang.org/x/sys/unix"
)

// peerUID returns the uid the kernel recorded for the other end of a unix
// socket connection at connect time (SO_PEERCRED).
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

// peerListener drops connections from processes whose uid is not allowed.
type peerListener struct {
	net.Listener
	allowed []int
	log     *slog.Logger
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && slices.Contains(l.allowed, uid) {
			return c, nil
		}
		l.log.Warn("proxyd: refused a connection from a process whose uid is not allowed", "peer_uid", uid, "err", err)
		_ = c.Close()
	}
}
