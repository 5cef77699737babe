package egress

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// For an absolute-form request net/http takes the host from the URL and drops the
// Host header (RFC 9112 lets a proxy ignore it), so the handler cannot see a Host
// that names another host than the URL. A proxy that forwards such a request lets
// the agent address one host while every log and the Host header it sent say
// another: it is refused with 421, as inside tunnels. The connection keeps a window
// of the bytes it read; the handler finds its request head there.

// headWindow bounds the window of delivered bytes kept: a request head
// (MaxHeaderBytes plus net/http's slack) always fits.
const headWindow = maxHeaderBytes + 16<<10

// headConn delivers what it reads so that a Read never returns bytes past the end of
// a header block ("\r\n\r\n" or "\n\n"): when net/http has parsed a request head,
// nothing after it has been read ahead, so the head is the last one in the window
// (net/http's background read may add one byte). Bytes read past a block's end are
// held for the next Read. It records until the connection is hijacked.
type headConn struct {
	net.Conn
	mu   sync.Mutex
	buf  []byte // the delivered bytes since the block end before the last one
	held []byte // read from the socket, not delivered yet
	end  int    // in buf, the end of the last delivered block
	off  bool
}

func (c *headConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(b) == 0 {
		return 0, nil
	}
	var (
		data []byte
		err  error
		cut  int
		ends bool
	)
	if len(c.held) > 0 {
		// Deliver the held bytes up to the next block end; the rest stays held, so
		// each byte is copied into held once.
		src := c.held
		if !c.off {
			cut, ends = c.blockEnd(src)
			src = src[:cut]
		}
		n := copy(b, src)
		ends = ends && n == len(src)
		c.held, data = c.held[n:], b[:n]
	} else {
		c.mu.Unlock()
		n, rerr := c.Conn.Read(b)
		c.mu.Lock()
		data, err = b[:n], rerr
		if !c.off && n > 0 {
			cut, ends = c.blockEnd(data)
			if cut < n {
				c.held = append(c.held[:0], data[cut:]...)
				data, err = data[:cut], nil
			}
		}
	}
	if c.off || len(data) == 0 {
		return len(data), err
	}
	if ends && c.end > 0 {
		// A block ends in data: the next head starts after it, so what came before
		// the previous block's end is no longer needed.
		c.buf = append(c.buf[:0], c.buf[c.end:]...)
		c.end = 0
	}
	c.buf = append(c.buf, data...)
	if ends {
		c.end = len(c.buf)
	}
	if len(c.buf) > 2*headWindow { // a long body: amortised, one copy per window
		drop := len(c.buf) - headWindow
		c.buf = append(c.buf[:0], c.buf[drop:]...)
		c.end = max(c.end-drop, 0)
	}
	return len(data), err
}

// blockEnd is the length of data up to and including the first end of a header
// block, counting the delivered bytes before it; len(data) and false when there is
// none.
func (c *headConn) blockEnd(data []byte) (int, bool) {
	tail := c.buf[max(len(c.buf)-3, 0):]
	for off := 0; ; {
		j := bytes.IndexByte(data[off:], '\n')
		if j < 0 {
			return len(data), false
		}
		i := off + j
		off = i + 1
		// The bytes before this LF: "\r\n\r" or "\n" (with or without CR).
		var prev [3]byte
		k := 0
		for j := i - 1; j >= 0 && k < 3; j-- {
			prev[k] = data[j]
			k++
		}
		for j := len(tail) - 1; j >= 0 && k < 3; j-- {
			prev[k] = tail[j]
			k++
		}
		if k >= 1 && prev[0] == '\n' || k >= 2 && prev[0] == '\r' && prev[1] == '\n' {
			return i + 1, true
		}
	}
}

// NetConn is the socket under the recorder, for splice, once nothing is held.
func (c *headConn) NetConn() net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) > 0 {
		pc := &prefixConn{Conn: c.Conn, pre: c.held}
		c.held = nil
		return pc
	}
	return c.Conn
}

func (c *headConn) stop() {
	c.mu.Lock()
	c.off, c.buf = true, nil
	c.mu.Unlock()
}

// hostHeaders returns the Host header values of r's head: the last header block
// delivered, which must carry r's request line. found is false when it does not.
func (c *headConn) hostHeaders(r *http.Request) (hosts []string, found bool) {
	line := []byte(r.Method + " " + r.RequestURI + " " + r.Proto)
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buf
	if n := len(b); n > 0 && b[n-1] != '\n' {
		b = b[:n-1] // net/http's background read of the next request's first byte
	}
	at := bytes.LastIndex(b, line)
	for at > 0 && b[at-1] != '\n' {
		at = bytes.LastIndex(b[:at], line)
	}
	if at < 0 {
		return nil, false
	}
	rest := b[at+len(line):]
	if !bytes.HasPrefix(rest, []byte("\r\n")) && !bytes.HasPrefix(rest, []byte("\n")) {
		return nil, false
	}
	end, complete := headEnd(rest)
	if !complete || end != len(rest) {
		return nil, false // not the last block: a body spelled this line
	}
	for l := range bytes.Lines(rest[:end]) {
		if k, v, ok := bytes.Cut(l, []byte(":")); ok && bytes.EqualFold(bytes.TrimSpace(k), []byte("host")) {
			hosts = append(hosts, string(bytes.TrimSpace(v)))
		}
	}
	return hosts, true
}

// headEnd is the length of the header block at the start of b, which starts with
// the request line's end (up to the blank line); complete is false when b ends first.
func headEnd(b []byte) (n int, complete bool) {
	best := -1
	for _, sep := range [][]byte{[]byte("\r\n\r\n"), []byte("\n\n"), []byte("\n\r\n")} {
		if i := bytes.Index(b, sep); i >= 0 && (best < 0 || i+len(sep) < best) {
			best = i + len(sep)
		}
	}
	if best < 0 {
		return len(b), false
	}
	return best, true
}

// recordingListener wraps accepted connections in headConns.
type recordingListener struct{ net.Listener }

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &headConn{Conn: c}, nil
}

// Listener wraps l so the proxy can check the Host header of absolute-form requests;
// serve NewServer's server on it. On another listener such requests are refused.
func (p *Proxy) Listener(l net.Listener) net.Listener { return recordingListener{l} }

// sameHost reports whether a Host header value names the URL's host and port.
func sameHost(hv string, scheme, host string, port int) bool {
	h, ps, err := net.SplitHostPort(hv)
	if err != nil {
		h, ps = hv, ""
	}
	pn := defaultPort(scheme)
	if ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil {
			return false
		}
		pn = n
	}
	if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
		h = "[" + h + "]"
	}
	name, _, err := ParseHost(h)
	return err == nil && name == host && pn == port
}
