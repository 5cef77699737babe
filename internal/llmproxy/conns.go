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

// GuaranteedConns is how many connection slots of a shared pool each listener
// is guaranteed (fewer when the pool has not that many per listener): slots
// other listeners cannot take, so a run within its own caps cannot delay
// another run's first connection however many connections it holds.
const GuaranteedConns = 8

// ConnLimit is a pool of connection slots that several listeners share fairly.
// Each listener is guaranteed g = min(GuaranteedConns, its own cap,
// pool/listeners) slots. Beyond its guarantee a listener borrows, first come,
// from what is left once every guarantee and a headroom (a quarter of the pool)
// are set aside: the headroom is where the guarantees of listeners that join
// later come from, so up to headroom/GuaranteedConns runs started while the
// others hold all they may are still served at once (beyond that a newcomer
// waits for a slot to be released).
type ConnLimit struct {
	total int

	mu      sync.Mutex
	used    int
	members map[*LimitedListener]struct{}
	wake    chan struct{} // closed and replaced when a slot frees or a member leaves
}

// NewConnLimit returns a pool of n slots (n > 0).
func NewConnLimit(n int) *ConnLimit {
	return &ConnLimit{total: n, members: map[*LimitedListener]struct{}{}, wake: make(chan struct{})}
}

// guarantee is l's guaranteed slots with n members (p.mu held).
func (p *ConnLimit) guarantee(l *LimitedListener, n int) int {
	return min(GuaranteedConns, cap(l.local), p.total/max(n, 1))
}

// tryTake takes a slot for l if the fair-share rule allows it; otherwise it
// returns a channel closed when the answer may change.
func (p *ConnLimit) tryTake(l *LimitedListener) (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used < p.total {
		n := len(p.members)
		ok := l.pooled < p.guarantee(l, n)
		if !ok {
			// Borrow only from what the guarantees and the headroom leave.
			lendable := p.total - p.total/4
			borrowed := 0
			for m := range p.members {
				g := p.guarantee(m, n)
				lendable -= g
				borrowed += max(0, m.pooled-g)
			}
			ok = borrowed < lendable
		}
		if ok {
			p.used++
			l.pooled++
			return true, nil
		}
	}
	return false, p.wake
}

func (p *ConnLimit) give(l *LimitedListener) {
	p.mu.Lock()
	p.used--
	l.pooled--
	p.signal()
	p.mu.Unlock()
}

func (p *ConnLimit) join(l *LimitedListener) {
	p.mu.Lock()
	p.members[l] = struct{}{}
	p.mu.Unlock()
}

func (p *ConnLimit) leave(l *LimitedListener) {
	p.mu.Lock()
	delete(p.members, l)
	p.signal() // its guarantee is free for the others
	p.mu.Unlock()
}

// signal wakes every waiter to check again (p.mu held).
func (p *ConnLimit) signal() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// LimitedListener accepts a connection only when it holds a slot of its own
// and one of its shared pool; a slot is released when the connection closes.
type LimitedListener struct {
	net.Listener
	local  chan struct{}
	shared *ConnLimit
	done   chan struct{}
	once   sync.Once
	active atomic.Int64
	pooled int // slots of shared held (shared.mu)
}

// LimitListener wraps ln so that at most perListener of its connections are open
// at once, each also holding a slot of shared (nil for none), which guarantees
// it its fair share (see ConnLimit).
func LimitListener(ln net.Listener, perListener int, shared *ConnLimit) *LimitedListener {
	l := &LimitedListener{Listener: ln, local: make(chan struct{}, perListener), shared: shared, done: make(chan struct{})}
	if shared != nil {
		shared.join(l)
	}
	return l
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
	for {
		ok, wake := l.shared.tryTake(l)
		if ok {
			return true
		}
		select {
		case <-l.done:
			<-l.local
			return false
		case <-wake:
		}
	}
}

func (l *LimitedListener) release() {
	if l.shared != nil {
		l.shared.give(l)
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

// Close closes the listener and wakes an Accept waiting for a slot. The
// listener leaves its pool: its guarantee goes to the others (connections it
// accepted keep their slots until they close).
func (l *LimitedListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		if l.shared != nil {
			l.shared.leave(l)
		}
	})
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
