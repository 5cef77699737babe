//go:build !linux

package inproc

import (
	"errors"
	"net"
)

const peerCredSupported = false

func peerUID(net.Conn) (int, error) {
	return -1, errors.New("peer credentials are not supported on this platform")
}
