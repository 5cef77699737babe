package egress

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

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
	for _, want := range []string{"CONNECT api.test:" + h.up.Port(), "GET plain.test:" + h.plain.Port(), "CONNECT tunnel.test:" + h.up.Port()} {
		if !strings.Contains(got, want) {
			t.Errorf("upstream proxy did not see %q: %s", want, got)
		}
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
