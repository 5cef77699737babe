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
}

// parseAudit wires srv's hooks so that parser refusals are recorded with base's
// fields. onClose, if set, is called with the connection's track when it closes.
func (p *Proxy) parseAudit(srv *http.Server, base port.EgressRecord, onClose func(*connTrack)) {
	var conns sync.Map // net.Conn -> *connTrack
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		ct := &connTrack{}
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
