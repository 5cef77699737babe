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

// Accept returns the next connection from an allowed peer.
func (l *peerListener) Accept() (net.Conn, error) {
	return peercred.Accept(l.Listener, peerUID,
		func(uid int) bool { return slices.Contains(l.allowed, uid) },
		func(uid int, err error) {
			l.log.Warn("proxyd: refused a connection from a process whose uid is not allowed", "peer_uid", uid, "err", err)
		})
}
