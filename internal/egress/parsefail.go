package egress

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// net/http answers some malformed requests itself (a duplicate Host, a header name
// with braces, a host it cannot parse) and never calls the handler. Every refused
// attempt must still be audited, so each server the proxy runs tracks its
// connections: a connection that read request bytes (StateActive) and closed before
// the handler ran for them was refused by the parser.

type connKey struct{}

// connTrack is one connection's state.
type connTrack struct {
	pending atomic.Bool  // bytes of a request were read; no handler ran for them yet
	served  atomic.Int64 // requests that reached the handler
	head    *headConn    // nil on a listener without the recorder
}

// parseAudit wires srv's hooks so that parser refusals are recorded with base's
// fields. onClose, if set, is called with the connection's track when it closes.
func (p *Proxy) parseAudit(srv *http.Server, base port.EgressRecord, onClose func(*connTrack)) {
	var conns sync.Map // net.Conn -> *connTrack
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		ct := &connTrack{}
		ct.head, _ = c.(*headConn)
		conns.Store(c, ct)
		return context.WithValue(ctx, connKey{}, ct)
	}
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		v, ok := conns.Load(c)
		if !ok {
			return
		}
		ct := v.(*connTrack)
		switch st {
		case http.StateActive:
			ct.pending.Store(true)
		case http.StateHijacked:
			conns.Delete(c)
			if ct.head != nil {
				ct.head.stop() // a tunnel's bytes are no request heads
			}
		case http.StateClosed:
			conns.Delete(c)
			if ct.pending.Load() {
				rec := base
				rec.Time, rec.Status, rec.Guard = time.Now().UTC(), http.StatusBadRequest, port.GuardRequest
				rec.Error = "the request was refused while it was parsed (malformed request line, host or headers)"
				p.record(rec)
			}
			if onClose != nil {
				onClose(ct)
			}
		}
	}
}

// handled marks the request's connection as served by the handler.
func handled(r *http.Request) {
	if ct, ok := r.Context().Value(connKey{}).(*connTrack); ok {
		ct.pending.Store(false)
		ct.served.Add(1)
	}
}

// forwardHostOK checks the Host header of an absolute-form request against its URL
// (see hostcheck.go); the denial when it names another host or cannot be checked.
func forwardHostOK(r *http.Request, t *target) *port.EgressDenial {
	ct, _ := r.Context().Value(connKey{}).(*connTrack)
	if ct == nil || ct.head == nil {
		return &port.EgressDenial{Status: http.StatusMisdirectedRequest, Guard: port.GuardRequest, Target: t.host, Message: "the request's Host header cannot be checked"}
	}
	hosts, found := ct.head.hostHeaders(r)
	if !found {
		return &port.EgressDenial{Status: http.StatusMisdirectedRequest, Guard: port.GuardRequest, Target: t.host, Message: "the request's Host header cannot be checked"}
	}
	for _, h := range hosts {
		if !sameHost(h, t.scheme, t.host, t.port) {
			return &port.EgressDenial{Status: http.StatusMisdirectedRequest, Guard: port.GuardRequest, Target: t.hostPort(),
				Message: "the Host header names another host than the request's URL"}
		}
	}
	return nil
}
