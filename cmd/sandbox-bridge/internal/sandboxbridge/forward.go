package sandboxbridge

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds connecting to the proxy's socket. The socket is local, so a slow
// connect means the proxy is gone or overloaded.
const dialTimeout = 10 * time.Second

// forwarder accepts TCP connections and pipes each to a new connection to the socket.
type forwarder struct {
	ln     net.Listener
	socket string
	log    *slog.Logger
	// network is what socket is dialled with ("" for "unix"; "tcp" for an exposed port).
	network string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	pipes  sync.WaitGroup // Add only under mu while !closed, so close's Wait is final
	served chan struct{}
}

func newForwarder(ln net.Listener, socket string, log *slog.Logger) *forwarder {
	return &forwarder{ln: ln, socket: socket, log: log, conns: make(map[net.Conn]struct{}), served: make(chan struct{})}
}

// serve accepts until the listener is closed.
func (f *forwarder) serve() {
	defer close(f.served)
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			f.log.Warn("bridge: accept", slog.Any("err", err))
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors: do not spin
			continue
		}
		if !f.track(c, true) {
			_ = c.Close()
			return
		}
		go f.pipe(c)
	}
}

// track registers a connection so close can cut it (and, for a new client, its pipe
// so close can wait for it); false once closing.
func (f *forwarder) track(c net.Conn, newPipe bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	if newPipe {
		f.pipes.Add(1)
	}
	return true
}

func (f *forwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
	}
}

// pipe copies both ways between the client and a new socket connection. A clean end
// of one direction is passed on as a half-close (the HTTP client may still be reading
// the answer); an error in either direction closes both.
func (f *forwarder) pipe(client net.Conn) {
	defer f.pipes.Done()
	defer client.Close()
	network := f.network
	if network == "" {
		network = "unix"
	}
	up, err := net.DialTimeout(network, f.socket, dialTimeout)
	if err != nil {
		f.log.Warn("bridge: cannot reach the LLM proxy socket", slog.String("socket", f.socket), slog.Any("err", err))
		f.untrack(client)
		return
	}
	defer up.Close()
	if !f.track(up, false) {
		f.untrack(client)
		return
	}
	defer f.untrack(client, up)

	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		if _, err := io.Copy(dst, src); err != nil {
			_ = client.Close()
			_ = up.Close()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go copyHalf(up, client)
	go copyHalf(client, up)
	<-done
	<-done
}

// close stops accepting, cuts every forwarded connection and waits for the pipes.
func (f *forwarder) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	<-f.served
	f.pipes.Wait()
}
