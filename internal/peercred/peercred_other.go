//go:build !linux

// Package peercred reads the credentials the kernel recorded for the other end of a
// unix socket connection (SO_PEERCRED): what the peer cannot lie about.
package peercred

import (
	"errors"
	"net"
)

// Supported says whether UID works on this platform.
const Supported = false

// UID is not supported on this platform.
func UID(net.Conn) (int, error) {
	return -1, errors.New("peer credentials are not supported on this platform")
}
