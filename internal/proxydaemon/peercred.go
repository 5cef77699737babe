package proxydaemon

import (
	"log/slog"
	"net"
	"slices"

	"github.com/agentsandbox/sandbox/internal/peercred"
)

// peerUID is the uid the kernel recorded for the peer (see internal/peercred).
var peerUID = peercred.UID

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
