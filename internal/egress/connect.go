package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// serveConnect handles CONNECT host:port: a plain tunnel for tunnel-only providers,
// TLS terminated with the run's CA otherwise.
func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request) {
	rec := port.EgressRecord{Time: time.Now().UTC(), Mode: "tunnel", Method: "CONNECT", Scheme: "https"}
	t, pr, tlsOK, plainOK, d := p.connectTarget(r, &rec)
	if d != nil {
		p.deny(w, rec, d)
		return
	}
	var err error
	hj, ok := w.(http.Hijacker)
	if !ok {
		p.deny(w, rec, &port.EgressDenial{Status: 500, Guard: port.GuardRequest, Message: "the connection cannot be taken over"})
		return
	}
	var up net.Conn
	if pr.tunnelOnly {
		if d := p.sendOne(t.hostPort()); d != nil {
			p.deny(w, rec, d)
			return
		}
		up, err = p.dialTunnel(r.Context(), t)
		if err != nil {
			if dd := denyFor(err, t.hostPort()); dd != nil {
				p.deny(w, rec, dd)
				return
			}
			rec.Status, rec.Error, rec.Latency = http.StatusBadGateway, clip(err.Error(), 256), time.Since(rec.Time)
			p.record(rec)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, `{"error":{"type":"egress_upstream_error","message":"the upstream could not be reached"}}`+"\n")
			return
		}
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		if up != nil {
			_ = up.Close()
		}
		return
	}
	if !p.track(conn) {
		_ = conn.Close()
		if up != nil {
			_ = up.Close()
		}
		return
	}
	defer p.untrack(conn)
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = conn.Close()
		if up != nil {
			_ = up.Close()
		}
		return
	}
	client := net.Conn(conn)
	if n := brw.Reader.Buffered(); n > 0 {
		pre, _ := brw.Reader.Peek(n)
		client = &prefixConn{Conn: conn, pre: append([]byte(nil), pre...)}
	}
	if pr.tunnelOnly {
		rec.Status = http.StatusOK
		rec.ReqBytes, rec.RespBytes, rec.Error = p.splice(client, up)
		rec.Latency = time.Since(rec.Time)
		p.record(rec)
		return
	}
	p.mitm(client, t, tlsOK, plainOK)
}

// connectTarget checks a CONNECT's host:port and finds its provider: for TLS
// (tlsOK), for plain HTTP (plainOK), or both; which one a tunnel gets is decided by
// its first byte. It fills rec's host and provider.
func (p *Proxy) connectTarget(r *http.Request, rec *port.EgressRecord) (_ *target, _ *provider, tlsOK, plainOK bool, _ *port.EgressDenial) {
	rec.Host = clip(strings.ToLower(r.Host), 256)
	hostS, portS, err := net.SplitHostPort(r.Host)
	if err != nil {
		return nil, nil, false, false, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: clip(r.Host, 256), Message: "CONNECT needs host:port"}
	}
	portN, err := strconv.Atoi(portS)
	if err != nil || portN < 1 || portN > 65535 {
		return nil, nil, false, false, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: clip(r.Host, 256), Message: "bad port"}
	}
	t := &target{scheme: "https", port: portN}
	if strings.Contains(hostS, ":") {
		hostS = "[" + hostS + "]"
	}
	// Recorded as asked for, before the check can refuse it.
	rec.Host = clip(strings.ToLower(hostS), 256)
	if name, ip, err := ParseHost(hostS); err == nil {
		rec.Host = name
		if ip.IsValid() {
			rec.Host = ip.String()
		}
	}
	if d := p.checkHost(hostS, t, clip(r.Host, 256)); d != nil {
		return nil, nil, false, false, d
	}
	rec.Host = t.host
	// A CONNECT says nothing of what will flow: TLS for https rules, or plain HTTP
	// for http rules (Node's fetch tunnels http:// through its proxy too). Which one
	// is decided by the first byte inside the tunnel.
	prTLS, dTLS := p.pol.match("https", t.host, t.port, "", false, "", t.hostPort())
	prPlain, dPlain := p.pol.match("http", t.host, t.port, "", false, "", t.hostPort())
	switch {
	case dTLS != nil && dTLS.Guard == port.GuardAmbiguous:
		return nil, nil, false, false, dTLS
	case dPlain != nil && dPlain.Guard == port.GuardAmbiguous:
		return nil, nil, false, false, dPlain
	case dTLS != nil && dPlain != nil:
		if dTLS.Guard == port.GuardAllowlist && dPlain.Guard != port.GuardAllowlist {
			dTLS = dPlain // the host is known: say which guard
		}
		return nil, nil, false, false, dTLS
	}
	pr := prTLS
	if pr == nil {
		pr = prPlain
	}
	rec.Provider = pr.id
	return t, pr, prTLS != nil, prPlain != nil, nil
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.hijacked[c] = struct{}{}
	p.tunnels.Add(1)
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.hijacked, c)
	p.mu.Unlock()
	p.tunnels.Done()
}

// splice copies both ways, counting against the per-request (upload) and per-run
// caps; it returns the bytes each way and why it was cut, if it was. Bytes move in
// bounded io.CopyN steps between the bare connections, so the kernel can splice them.
func (p *Proxy) splice(client, up net.Conn) (sent, recv int64, why string) {
	defer client.Close()
	defer up.Close()
	rawClient := unwrapConn(client)
	var cut atomic.Value
	copyDir := func(dst, src net.Conn, n *int64, max int64) {
		for {
			step := min(int64(spliceStep), max-*n, p.maxRun-p.runBytes.Load())
			if step <= 0 {
				if max-*n <= 0 {
					cut.Store("the tunnel's upload is over the per-request cap")
				} else {
					cut.Store("the run's egress byte cap was reached")
				}
				break
			}
			k, err := io.CopyN(dst, src, step)
			*n += k
			p.runBytes.Add(k)
			if err == io.EOF {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
					return
				}
				break
			}
			if err != nil {
				break
			}
		}
		_ = client.Close()
		_ = up.Close()
	}
	done := make(chan struct{})
	go func() { copyDir(up, rawClient, &sent, p.maxReq); close(done) }()
	copyDir(rawClient, up, &recv, 1<<62)
	<-done
	if v, ok := cut.Load().(string); ok {
		why = v
	}
	return sent, recv, why
}

// spliceStep bounds one copy step of a tunnel, so caps are checked between steps.
const spliceStep = 1 << 20

// unwrapConn returns the connection under listener wrappers (NetConn), so io.Copy sees
// the kernel socket.
func unwrapConn(c net.Conn) net.Conn {
	for {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = w.NetConn()
	}
}

// mitm terminates TLS for an allowlisted host with a leaf of the run's CA and serves
// the requests inside through serveForward, each checked again: a request for another
// host inside the tunnel (domain fronting) is refused.
//
// A tunnel whose first byte does not start a TLS handshake carries plain HTTP, served
// the same way for hosts with http rules.
func (p *Proxy) mitm(client net.Conn, t *target, allowTLS, allowPlain bool) {
	br := bufio.NewReader(client)
	_ = client.SetReadDeadline(time.Now().Add(readHeaderTimeout))
	first, err := br.Peek(1)
	_ = client.SetReadDeadline(time.Time{})
	if err != nil {
		p.record(port.EgressRecord{Time: time.Now().UTC(), Mode: "tunnel", Method: "CONNECT", Scheme: "https", Host: t.host,
			Status: http.StatusBadRequest, Guard: port.GuardRequest, Error: "the tunnel closed before its first byte"})
		_ = client.Close()
		return
	}
	conn := &bufConn{Conn: client, r: br}
	if first[0] != tlsHandshakeRecord {
		if !allowPlain {
			p.refuseInTunnel(conn, t, "http", "plain http to a host allowed for https only")
			return
		}
		p.serveTunnel(conn, t, "http")
		return
	}
	if !allowTLS {
		p.refuseInTunnel(conn, t, "https", "TLS to a host allowed for plain http only")
		return
	}
	var sniBad atomic.Bool
	tc := tls.Server(conn, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" {
				if name, _, err := ParseHost(hello.ServerName); err != nil || name != t.host {
					sniBad.Store(true)
					return nil, errors.New("egress: SNI does not match the CONNECT host")
				}
			}
			return p.ca.Leaf(t.host)
		},
	})
	_ = tc.SetDeadline(time.Now().Add(readHeaderTimeout))
	if err := tc.Handshake(); err != nil {
		if sniBad.Load() {
			p.record(port.EgressRecord{Time: time.Now().UTC(), Mode: "mitm", Method: "CONNECT", Scheme: "https", Host: t.host,
				Status: http.StatusForbidden, Guard: port.GuardRequest, Error: "TLS server name differs from the CONNECT host"})
		} else {
			p.record(port.EgressRecord{Time: time.Now().UTC(), Mode: "mitm", Method: "CONNECT", Scheme: "https", Host: t.host,
				Status: http.StatusBadRequest, Guard: port.GuardRequest, Error: "the TLS handshake inside the tunnel failed"})
		}
		_ = tc.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	p.serveTunnel(tc, t, "https")
}

// tlsHandshakeRecord is the first byte of a TLS connection (a handshake record).
const tlsHandshakeRecord = 0x16

// refuseInTunnel records a tunnel whose content does not fit its host's rules and
// closes it (with a JSON denial when the client speaks plain HTTP).
func (p *Proxy) refuseInTunnel(c net.Conn, t *target, scheme, why string) {
	p.record(port.EgressRecord{Time: time.Now().UTC(), Mode: "tunnel", Method: "CONNECT", Scheme: scheme, Host: t.host,
		Status: http.StatusForbidden, Guard: port.GuardPort, Error: why})
	if scheme == "http" {
		body, _ := json.Marshal(map[string]any{"error": map[string]string{"type": "egress_denied", "guard": port.GuardPort, "target": t.hostPort(), "message": why}})
		_ = c.SetWriteDeadline(time.Now().Add(readHeaderTimeout))
		_, _ = fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n", len(body)+1, body)
	}
	_ = c.Close()
}

// serveTunnel serves the HTTP requests inside a tunnel (TLS terminated, or plain),
// each checked again through serveForward.
func (p *Proxy) serveTunnel(c net.Conn, t *target, scheme string) {
	mode := "mitm"
	if scheme == "http" {
		mode = "forward"
	}
	authority := t.hostPort()
	srv := &http.Server{
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handled(r)
			if !p.allow(w, r, mode) {
				return
			}
			u := *r.URL
			if !u.IsAbs() {
				u.Scheme, u.Host = scheme, r.Host
			}
			// Domain fronting: the inner request must name the tunnel's host and port.
			ht := &target{port: defaultPort(scheme)}
			h, ps, err := net.SplitHostPort(u.Host)
			if err != nil {
				h, ps = u.Host, ""
			}
			if ps != "" {
				ht.port, _ = strconv.Atoi(ps)
			}
			if strings.Contains(h, ":") {
				h = "[" + h + "]"
			}
			name, _, herr := ParseHost(h)
			if herr != nil || name != t.host || ht.port != t.port || strings.ToLower(u.Scheme) != scheme {
				p.deny(w, port.EgressRecord{Time: time.Now().UTC(), Mode: mode, Method: clip(r.Method, 16), Scheme: scheme, Host: t.host},
					&port.EgressDenial{Status: http.StatusMisdirectedRequest, Guard: port.GuardRequest, Target: authority, Message: "the request inside the tunnel names another host than the CONNECT"})
				return
			}
			u.Host = authority
			p.serveForward(w, r, mode, &u, "", false, 0)
		}),
	}
	// A tunnel that never carries a request the handler sees (garbage, a request the
	// parser refused, nothing at all) is an attempt too: it is recorded.
	base := port.EgressRecord{Mode: mode, Scheme: scheme, Host: t.host}
	p.parseAudit(srv, base, func(ct *connTrack) {
		if ct.served.Load() == 0 && !ct.pending.Load() {
			rec := base
			rec.Time, rec.Method, rec.Status, rec.Guard = time.Now().UTC(), "CONNECT", http.StatusBadRequest, port.GuardRequest
			rec.Error = "the tunnel closed without a request"
			p.record(rec)
		}
	})
	ln := newOneConnListener(c)
	_ = srv.Serve(ln)
	<-ln.closed
}

// oneConnListener serves one connection, then blocks until it is closed.
type oneConnListener struct {
	c      net.Conn
	once   sync.Once
	closed chan struct{}
	ch     chan net.Conn
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{closed: make(chan struct{}), ch: make(chan net.Conn, 1)}
	l.c = &notifyConn{Conn: c, done: func() { l.once.Do(func() { close(l.closed) }) }}
	l.ch <- l.c
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}
func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

type notifyConn struct {
	net.Conn
	done func()
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.done()
	return err
}

// prefixConn replays bytes read ahead by the server before the hijack.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// dialTunnel connects a tunnel-only CONNECT: through the upstream proxy when there
// is one (tunnelled to the checked address), else directly through the checking
// dialer.
func (p *Proxy) dialTunnel(ctx context.Context, t *target) (net.Conn, error) {
	if p.upstream == "" {
		return p.dialer.DialContext(ctx, "tcp", t.hostPort())
	}
	return p.dialUpstream(ctx, "tcp", t.hostPort())
}

// bufConn reads through the reader that peeked at the tunnel's first byte.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }
