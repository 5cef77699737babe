// Package egresstest provides loopback HTTPS upstreams with their own CA, and a
// resolver that maps test host names to them, for tests of the egress proxy.
package egresstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// Seen is one request an Upstream received.
type Seen struct {
	Method, Host, Path, RawQuery string
	Header                       http.Header
	Body                         string
}

// Upstream is a loopback HTTPS (or HTTP) server answering for test host names. Its
// handler echoes the request as JSON unless Handler is set.
type Upstream struct {
	*httptest.Server
	// Pool trusts the upstream's certificates; PEM is its CA certificate.
	Pool *x509.CertPool
	PEM  []byte
	// Handler, if set, answers instead of the echo.
	Handler http.Handler

	mu   sync.Mutex
	seen []Seen
}

// NewUpstream starts a TLS upstream whose certificate covers names (tls false: plain
// HTTP). It is closed when the test ends.
func NewUpstream(t testing.TB, useTLS bool, names ...string) *Upstream {
	t.Helper()
	u := &Upstream{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	if useTLS {
		caCert, caKey, pemBytes := newCA(t)
		u.Pool = x509.NewCertPool()
		u.Pool.AddCert(caCert)
		u.PEM = pemBytes
		leaf := newLeaf(t, caCert, caKey, names)
		srv.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			for _, n := range names {
				if strings.EqualFold(h.ServerName, n) {
					return leaf, nil
				}
			}
			return nil, errors.New("unknown server name")
		}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	u.Server = srv
	t.Cleanup(srv.Close)
	return u
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s := Seen{Method: r.Method, Host: r.Host, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: string(b)}
	u.mu.Lock()
	u.seen = append(u.seen, s)
	h := u.Handler
	u.mu.Unlock()
	if h != nil {
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		h.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s)
}

// Seen returns the requests received so far.
func (u *Upstream) Seen() []Seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Seen(nil), u.seen...)
}

// Port is the upstream's port.
func (u *Upstream) Port() string {
	_, p, _ := net.SplitHostPort(u.Listener.Addr().String())
	return p
}

// Resolver maps names to addresses; other names fail. Lookups are counted, and a
// name may answer differently on each lookup (DNS rebinding).
type Resolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	lookups map[string]int
}

// NewResolver returns an empty Resolver.
func NewResolver() *Resolver {
	return &Resolver{answers: map[string][][]netip.Addr{}, lookups: map[string]int{}}
}

// Set makes name's next lookup answer the first of answers, the one after the next,
// and so on (the last answer repeats); Lookups counts from zero again.
func (r *Resolver) Set(name string, answers ...[]netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[strings.ToLower(name)] = answers
	r.lookups[strings.ToLower(name)] = 0
}

// Lookups says how often name was looked up.
func (r *Resolver) Lookups(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups[strings.ToLower(name)]
}

// LookupNetIP implements egress.Resolver.
func (r *Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	as, ok := r.answers[host]
	if !ok || len(as) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := r.lookups[host]
	r.lookups[host]++
	if i >= len(as) {
		i = len(as) - 1
	}
	return as[i], nil
}

// Loopback is 127.0.0.1, for Set.
var Loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

func newCA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egresstest upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newLeaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, names []string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// ForwardProxy is an HTTP forward proxy on loopback standing for a host's upstream
// proxy: it resolves names itself, through its Resolver, as a real one would (so a
// name handed to it may be resolved to another address than the one checked before),
// serves CONNECT tunnels and absolute-form requests, and records what it was asked.
type ForwardProxy struct {
	*httptest.Server

	mu   sync.Mutex
	res  *Resolver
	seen []string
}

// NewForwardProxy starts a ForwardProxy resolving through res (see SetResolver); it
// is closed when the test ends.
func NewForwardProxy(t testing.TB, res *Resolver) *ForwardProxy {
	t.Helper()
	f := &ForwardProxy{res: res}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// SetResolver replaces the proxy's resolver.
func (f *ForwardProxy) SetResolver(res *Resolver) {
	f.mu.Lock()
	f.res = res
	f.mu.Unlock()
}

// Seen returns "METHOD target" for every request the proxy received.
func (f *ForwardProxy) Seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

// dialTarget resolves hostPort's host (unless it is an address) and dials it.
func (f *ForwardProxy) dialTarget(ctx context.Context, hostPort string) (net.Conn, error) {
	host, portS, err := net.SplitHostPort(hostPort)
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(host); err != nil {
		f.mu.Lock()
		res := f.res
		f.mu.Unlock()
		if res == nil {
			return nil, errors.New("no resolver")
		}
		addrs, err := res.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		host = addrs[0].String()
	}
	return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", net.JoinHostPort(host, portS))
}

func (f *ForwardProxy) serve(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	if r.Method != http.MethodConnect {
		target = r.URL.String()
	}
	f.mu.Lock()
	f.seen = append(f.seen, r.Method+" "+target)
	f.mu.Unlock()
	if r.Method == http.MethodConnect {
		up, err := f.dialTarget(r.Context(), r.Host)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			up.Close()
			return
		}
		_, _ = io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
		go func() { _, _ = io.Copy(up, conn); up.Close() }()
		_, _ = io.Copy(conn, up)
		conn.Close()
		return
	}
	hostPort := r.URL.Host
	if r.URL.Port() == "" {
		hostPort = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return f.dialTarget(ctx, hostPort) }}
	defer tr.CloseIdleConnections()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	resp, err := tr.RoundTrip(out)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// Canary listens on addr (an address on loopback the test owns, such as
// 127.0.0.2:PORT) and counts the connections that reach it: none must.
type Canary struct {
	ln   net.Listener
	mu   sync.Mutex
	hits int
}

// NewCanary listens on addr until the test ends.
func NewCanary(t testing.TB, addr string) *Canary {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &Canary{ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.mu.Lock()
			c.hits++
			c.mu.Unlock()
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\ncanary")
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return c
}

// Hits is how many connections reached the canary.
func (c *Canary) Hits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}
