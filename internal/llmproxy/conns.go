package llmproxy

import (
	"net"
	"sync"
	"sync/atomic"
)

// Connection limits. An agent once opened ~20,000 connections to its socket in
// two seconds; without a cap each becomes a host file descriptor and a goroutine
// waiting for headers, and the host could not start another run's proxy. Past a
// cap, connections wait in the kernel's listen queue (a descriptor of the
// sandbox's, not ours) until a slot frees: they are queued, not refused.
const (
	// DefaultConnsPerRun caps one run's open connections to its proxy.
	DefaultConnsPerRun = 64
	// DefaultConnsTotal caps the connections of all runs of one manager or router.
	DefaultConnsTotal = 1024
)

// ConnLimit is a pool of connection slots that several listeners share.
type ConnLimit struct{ sem chan struct{} }

// NewConnLimit returns a pool of n slots (n > 0).
func NewConnLimit(n int) *ConnLimit { return &ConnLimit{sem: make(chan struct{}, n)} }

// LimitedListener accepts a connection only when it holds a slot of its own
// and one of its shared pool; a slot is released when the connection closes.
type LimitedListener struct {
	net.Listener
	local  chan struct{}
	shared *ConnLimit
	done   chan struct{}
	once   sync.Once
	active atomic.Int64
}

// LimitListener wraps ln so that at most perListener of its connections are open
// at once, each also holding a slot of shared (nil for none).
func LimitListener(ln net.Listener, perListener int, shared *ConnLimit) *LimitedListener {
	return &LimitedListener{Listener: ln, local: make(chan struct{}, perListener), shared: shared, done: make(chan struct{})}
}

// Active is the number of accepted connections still open.
func (l *LimitedListener) Active() int { return int(l.active.Load()) }

func (l *LimitedListener) acquire() bool {
	select {
	case <-l.done:
		return false
	case l.local <- struct{}{}:
	}
	if l.shared == nil {
		return true
	}
	select {
	case <-l.done:
		<-l.local
		return false
	case l.shared.sem <- struct{}{}:
		return true
	}
}

func (l *LimitedListener) release() {
	if l.shared != nil {
		<-l.shared.sem
	}
	<-l.local
}

// Accept waits for a free slot, then for the next connection.
func (l *LimitedListener) Accept() (net.Conn, error) {
	if !l.acquire() {
		// Closed: the inner Accept fails at once.
		for {
			c, err := l.Listener.Accept()
			if err != nil {
				return nil, err
			}
			_ = c.Close()
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.release()
		return nil, err
	}
	l.active.Add(1)
	return &limitedConn{Conn: c, l: l}, nil
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *LimitedListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitedConn struct {
	net.Conn
	l    *LimitedListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.active.Add(-1)
		c.l.release()
	})
	return err
}

// NetConn returns the accepted connection itself, so a front that takes a connection
// over (a tunnel) can let the kernel move its bytes (splice); Close stays the
// wrapper's.
func (c *limitedConn) NetConn() net.Conn { return c.Conn }
