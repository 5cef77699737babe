package egress

import (
	"net"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRedactorResponse: the reflection guard's work on a small response to a
// credentialed request (three headers, an 11-byte body), with the value compiled for
// each response ("compile") and once per run, as the proxy does ("per-run").
func BenchmarkRedactorResponse(b *testing.B) {
	vals := map[string]string{"token": canary}
	hdr := http.Header{"Content-Type": {"application/json"}, "Date": {"Thu, 26 Nov 2026 10:00:00 GMT"}, "Content-Length": {"11"}}
	body := []byte(`{"ok":true}`)
	respond := func(red *Redactor) {
		for k, vs := range hdr {
			if drop, _ := red.Name(k); drop {
				continue
			}
			for _, v := range vs {
				_, _ = red.Header(v)
			}
		}
		_, _ = red.Feed(body, true)
	}
	b.Run("compile", func(b *testing.B) {
		for b.Loop() {
			respond(NewRedactor(vals))
		}
	})
	b.Run("per-run", func(b *testing.B) {
		var c Compiled
		for b.Loop() {
			respond(c.Redactor(vals))
		}
	})
}

// BenchmarkHostHeaders: finding a request's own head after many on one connection.
func BenchmarkHostHeaders(b *testing.B) {
	head := "GET http://plain.test:8080/x HTTP/1.1\r\nHost: plain.test:8080\r\nUser-Agent: Go-http-client/1.1\r\nX-Key: {{token}}\r\nAccept-Encoding: gzip\r\n\r\n"
	c := &headConn{Conn: nil}
	c.buf = []byte(strings.Repeat(head, 1500)) // a long-lived keep-alive connection
	r, _ := http.NewRequest("GET", "http://plain.test:8080/x", nil)
	r.RequestURI, r.Proto = "http://plain.test:8080/x", "HTTP/1.1"
	for b.Loop() {
		if _, ok := c.hostHeaders(r); !ok {
			b.Fatal("not found")
		}
	}
	_ = net.Conn(nil)
}
