package egress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/agentsandbox/sandbox/internal/egress/egresstest"
	"github.com/agentsandbox/sandbox/port"
)

// chainProxy is a host-side upstream proxy that records what it is asked and sends
// everything to 127.0.0.1 (the test's upstreams), whatever the name.
type chainProxy struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newChainProxy(t *testing.T) *chainProxy {
	c := &chainProxy{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.seen = append(c.seen, r.Method+" "+r.Host)
		c.mu.Unlock()
		_, portS, _ := net.SplitHostPort(r.Host)
		if r.Method == http.MethodConnect {
			up, err := net.Dial("tcp", "127.0.0.1:"+portS)
			if err != nil {
				w.WriteHeader(502)
				return
			}
			conn, _, _ := w.(http.Hijacker).Hijack()
			io.WriteString(conn, "HTTP/1.1 200 OK\r\n\r\n")
			go func() { io.Copy(up, conn); up.Close() }()
			io.Copy(conn, up)
			conn.Close()
			return
		}
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Host = "127.0.0.1:" + portS
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			w.WriteHeader(502)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *chainProxy) requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// TestUpstreamProxyCascade: with an upstream proxy, every kind of egress goes
// through it, targets are still checked here first, and a run's proxy beats the
// manager's default.
func TestUpstreamProxyCascade(t *testing.T) {
	chain := newChainProxy(t)
	unused := newChainProxy(t)
	h := newHarness(t, func(p *port.EgressPolicy) {
		p.UpstreamProxy = chain.URL
		p.Providers = append(p.Providers, port.EgressProvider{ID: "inner", URIs: []string{"http://inner.test/"}})
	})
	h.res.Set("inner.test", []netip.Addr{netip.MustParseAddr("10.0.0.7")})
	// The manager's default is replaced by the run's.
	cp, _ := Compile(h.p.pol.src)
	p2, err := New(Config{RunID: "r", Policy: cp, UpstreamProxy: mustURL(unused.URL)})
	if err != nil || p2.upstream != strings.TrimPrefix(chain.URL, "http://") {
		t.Fatalf("cascade: %v %q", err, p2.upstream)
	}
	c := h.client()
	for _, u := range []string{h.url("api.test", "/v1/x"), "http://plain.test:" + h.plain.Port() + "/y", h.url("tunnel.test", "/z")} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		b := readAll(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", u, resp.StatusCode, b)
		}
	}
	got := strings.Join(chain.requests(), ",")
	// Every destination, plain http included, is a tunnel to the address checked here.
	for _, want := range []string{"CONNECT 127.0.0.1:" + h.up.Port(), "CONNECT 127.0.0.1:" + h.plain.Port()} {
		if !strings.Contains(got, want) {
			t.Errorf("upstream proxy did not see %q: %s", want, got)
		}
	}
	if strings.Contains(got, ".test") {
		t.Errorf("the upstream proxy was handed a name: %s", got)
	}
	if len(unused.requests()) != 0 {
		t.Error("the manager's default proxy was used")
	}
	// A name resolving inside is refused here, before the upstream proxy sees it.
	n := len(chain.requests())
	resp, err := c.Get("http://inner.test/")
	if err != nil {
		t.Fatal(err)
	}
	wantDenial(t, resp, 403, port.GuardSSRF)
	if len(chain.requests()) != n {
		t.Fatal("a refused target reached the upstream proxy")
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// TestUpstreamProxyRebinding: a name that answers an allowed address and then a
// loopback one cannot reach the loopback canary through the upstream proxy, which
// resolves names itself: it is asked to CONNECT to the checked address (the name
// travels only in the TLS server name and the Host header), for MITM, plain http
// and tunnel-only destinations alike. Before, the upstream proxy was handed the name
// and resolved it again (21 canary hits in the review).
func TestUpstreamProxyRebinding(t *testing.T) {
	fwd := egresstest.NewForwardProxy(t, nil)
	h := newHarness(t, func(p *port.EgressPolicy) { p.UpstreamProxy = fwd.URL })
	fwd.SetResolver(h.res)
	canaries := []*egresstest.Canary{
		egresstest.NewCanary(t, "127.0.0.2:"+h.up.Port()),
		egresstest.NewCanary(t, "127.0.0.2:"+h.plain.Port()),
	}
	rebind := []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	c := h.client()
	var failed []string
	for i := 0; i < 5; i++ {
		for name, u := range map[string]string{
			"api.test":    h.url("api.test", "/v1/x"),
			"plain.test":  "http://plain.test:" + h.plain.Port() + "/y",
			"tunnel.test": h.url("tunnel.test", "/z"),
		} {
			// The first answer is the allowed upstream, every later one the canary.
			h.res.Set(name, egresstest.Loopback, rebind)
			c.CloseIdleConnections()
			resp, err := c.Get(u)
			if err != nil {
				failed = append(failed, u+": "+err.Error())
				continue
			}
			body := readAll(t, resp)
			if resp.StatusCode != 200 || strings.Contains(body, "canary") {
				failed = append(failed, fmt.Sprintf("%s: %d %s", u, resp.StatusCode, body))
			}
		}
	}
	for _, cn := range canaries {
		if n := cn.Hits(); n != 0 {
			t.Fatalf("%d connections reached the loopback canary through the upstream proxy", n)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("requests failed: %q (audit %+v)", failed, h.p.Audit())
	}
	seen := fwd.Seen()
	// Connections to the upstream are pooled: at least one tunnel per kind.
	if len(seen) < 3 {
		t.Fatalf("the upstream proxy saw %d requests: %q", len(seen), seen)
	}
	for _, s := range seen {
		if !strings.HasPrefix(s, "CONNECT 127.0.0.1:") {
			t.Fatalf("the upstream proxy was asked %q: a name it resolves itself", s)
		}
	}
	// A name whose first answer is refused never reaches the upstream proxy.
	h.res.Set("api.test", rebind)
	h.p.transport.CloseIdleConnections()
	resp, err := c.Get(h.url("api.test", "/v1/x"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 && resp.StatusCode != 502 {
		t.Fatalf("a refused first answer: %d", resp.StatusCode)
	}
	resp.Body.Close()
	if len(fwd.Seen()) != len(seen) {
		t.Fatal("a refused destination reached the upstream proxy")
	}
}
