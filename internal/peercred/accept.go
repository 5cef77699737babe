package peercred

import "net"

// Accept returns the next connection of ln whose peer's uid (as uidOf reads it,
// UID in production) allowed accepts. Each other connection is closed after refused
// is told its uid and the error reading it, if any.
func Accept(ln net.Listener, uidOf func(net.Conn) (int, error), allowed func(uid int) bool, refused func(uid int, err error)) (net.Conn, error) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := uidOf(c)
		if err == nil && allowed(uid) {
			return c, nil
		}
		refused(uid, err)
		_ = c.Close()
	}
}
