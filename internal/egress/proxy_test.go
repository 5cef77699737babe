package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/agentsandbox/sandbox/internal/egress/egresstest"
	"github.com/agentsandbox/sandbox/port"
	"go.uber.org/goleak"
)

const canary = "canary-egress-7f3a9c1e5b2d4086"

type harness struct {
	t        testing.TB
	p        *Proxy
	addr     string
	up       *egresstest.Upstream
	plain    *egresstest.Upstream
	res      *egresstest.Resolver
	mu       sync.Mutex
	live     []port.EgressRecord
	credCall int
}

// newHarness serves a run's proxy on loopback TCP, with a TLS upstream answering as
// api.test and echo.test and a plain one as plain.test, both on 127.0.0.1 (allowed
// through the test exception only).
func newHarness(t testing.TB, mod func(*port.EgressPolicy)) *harness {
	h := &harness{t: t, res: egresstest.NewResolver()}
	h.up = egresstest.NewUpstream(t, true, "api.test", "echo.test", "other.test", "tunnel.test")
	h.plain = egresstest.NewUpstream(t, false)
	for _, n := range []string{"api.test", "echo.test", "other.test", "tunnel.test", "plain.test"} {
		h.res.Set(n, egresstest.Loopback)
	}
	up := h.up.Port()
	creds := port.CredentialFunc(func(ctx context.Context, runID, provider, name string) (string, error) {
		h.mu.Lock()
		h.credCall++
		h.mu.Unlock()
		switch name {
		case "token":
			return canary, nil
		case "crlf":
			return "a\r\nX-Evil: 1", nil
		}
		return "", errors.New("no such credential")
	})
	pol := &port.EgressPolicy{
		Providers: []port.EgressProvider{
			{ID: "api", URIs: []string{"https://api.test:" + up + "/v1/", "http://plain.test:" + h.plain.Port() + "/"}, Credentials: []string{"token", "crlf", "missing"},
				Placements: map[string]port.CredentialPlacement{"token": {Headers: []string{"authorization", "X-Api-Key", "X-Key"}, Path: true, Query: true, Body: true}}},
			{ID: "echo", URIs: []string{"https://echo.test:" + up + "/"}, Credentials: []string{"token"}},
			{ID: "other", URIs: []string{"https://other.test:" + up + "/"}},
			{ID: "tunnel", URIs: []string{"https://tunnel.test:" + up}, TunnelOnly: true},
		},
		Credentials: creds,
		OnAudit: func(r port.EgressRecord) {
			h.mu.Lock()
			h.live = append(h.live, r)
			h.mu.Unlock()
		},
	}
	if mod != nil {
		mod(pol)
	}
	cp, err := Compile(pol)
	if err != nil {
		t.Fatal(err)
	}
	h.p, err = New(Config{RunID: "run-egress-unit", Policy: cp, Resolver: h.res, RootCAs: h.up.Pool,
		Classifier: &Classifier{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := h.p.NewServer()
	go srv.Serve(h.p.Listener(ln))
	t.Cleanup(func() { srv.Close(); h.p.Close() })
	h.addr = ln.Addr().String()
	return h
}

// client goes through the proxy as HTTPS_PROXY would, trusting the run's CA (and the
// upstream's, for tunnels).
func (h *harness) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.p.CAPEM())
	pool.AppendCertsFromPEM(h.up.PEM)
	pu, _ := url.Parse("http://" + h.addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			// Only the proxy is reachable, as in a sandbox.
			if addr != h.addr {
				return nil, fmt.Errorf("direct dial to %s", addr)
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (h *harness) url(host, path string) string {
	return "https://" + host + ":" + h.up.Port() + path
}

func readAll(t *testing.T, r *http.Response) string {
	t.Helper()
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// denial decodes the proxy's JSON denial and checks its guard.
func wantDenial(t *testing.T, r *http.Response, status int, guard string) {
	t.Helper()
	body := readAll(t, r)
	if r.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", r.StatusCode, status, body)
	}
	var d struct {
		Error struct{ Type, Guard, Target, Message string }
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("denial is not JSON: %q", body)
	}
	if d.Error.Type != "egress_denied" || d.Error.Guard != guard || d.Error.Message == "" {
		t.Fatalf("denial %+v, want guard %q", d.Error, guard)
	}
	if strings.Contains(body, canary) {
		t.Fatal("the canary is in a denial")
	}
}

func (h *harness) checkNoCanary() {
	h.t.Helper()
	b, _ := json.Marshal(h.p.Audit())
	h.mu.Lock()
	lb, _ := json.Marshal(h.live)
	h.mu.Unlock()
	if strings.Contains(string(b)+string(lb), canary) {
		h.t.Fatalf("the canary is in the audit: %s", b)
	}
}

func TestMITMPlaceholderAndReflection(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client()
	req, _ := http.NewRequest("GET", h.url("api.test", "/v1/user?page=2&key={{token}}"), nil)
	req.Header.Set("Authorization", "Bearer {{token}}")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	seen := h.up.Seen()
	if len(seen) != 1 || seen[0].Header.Get("Authorization") != "Bearer "+canary || seen[0].RawQuery != "page=2&key="+canary || seen[0].Host != "api.test:"+h.up.Port() {
		t.Fatalf("upstream saw %+v", seen)
	}
	// The upstream echoed the token back; the agent sees the placeholder.
	if strings.Contains(body, canary) || !strings.Contains(body, "Bearer {{token}}") {
		t.Fatalf("reflection guard: %s", body)
	}
	a := h.p.Audit()
	if len(a) != 1 || a[0].Mode != "mitm" || a[0].Provider != "api" || a[0].Status != 200 || a[0].Path != "/v1/user?page=REDACTED&key=REDACTED" || a[0].Reflected < 2 || a[0].RespBytes == 0 {
		t.Fatalf("audit %+v", a)
	}
	h.checkNoCanary()
	if len(h.live) != 1 {
		t.Fatalf("live audit %d", len(h.live))
	}
}

func TestForwardPlainHTTP(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client()
	u := "http://plain.test:" + h.plain.Port() + "/x"
	req, _ := http.NewRequest("POST", u, strings.NewReader("hello"))
	req.Header.Set("X-Api-Key", "{{token}}")
	req.Header.Set("Authorization", "Basic literal-value-dropped")
	req.Header.Set("X-Forwarded-For", "1.2.3.4")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	seen := h.plain.Seen()
	if resp.StatusCode != 200 || len(seen) != 1 || seen[0].Header.Get("X-Api-Key") != canary || seen[0].Body != "hello" {
		t.Fatalf("%d %s %+v", resp.StatusCode, body, seen)
	}
	if seen[0].Header.Get("Authorization") != "" || seen[0].Header.Get("X-Forwarded-For") != "" {
		t.Fatalf("reserved or literal credential headers forwarded: %v", seen[0].Header)
	}
	if strings.Contains(body, canary) {
		t.Fatal("canary reflected")
	}
	// Absolute-form with a mismatched Host header: the URL's authority wins (RFC 9112
	// 3.2.2), so the upstream never sees the other name.
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n", u)
	r2, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r2)
	// A Host naming another host than the URL is refused, as inside tunnels.
	if r2.StatusCode != http.StatusMisdirectedRequest || r2.Header.Get("X-Egress-Guard") != port.GuardRequest || len(h.plain.Seen()) != 1 {
		t.Fatalf("mismatched Host: %d, upstream saw %d", r2.StatusCode, len(h.plain.Seen()))
	}
	h.checkNoCanary()
}

func TestDenials(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client()
	get := func(u string) *http.Response {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		return resp
	}
	// Not on the allowlist: forward HTTP and CONNECT alike (CONNECT denials surface
	// as a failed tunnel in the client, so check them raw below).
	wantDenial(t, get("http://nowhere.test/"), 403, port.GuardAllowlist)
	wantDenial(t, get("http://127.0.0.2:"+h.plain.Port()+"/"), 403, port.GuardSSRF)
	wantDenial(t, get("http://2130706433/"), 403, port.GuardSSRF)
	wantDenial(t, get("http://0x7f.1/"), 403, port.GuardSSRF)
	wantDenial(t, get("http://[::ffff:169.254.169.254]/latest/meta-data/"), 403, port.GuardSSRF)
	wantDenial(t, get("http://8.8.8.8/"), 403, port.GuardAllowlist)
	// The host is allowed on another port only.
	wantDenial(t, get("http://plain.test:1/"), 403, port.GuardPort)
	// Path scoping: api's https rule is /v1/ only.
	wantDenial(t, get(h.url("api.test", "/v2/x")), 403, port.GuardAllowlist)
	wantDenial(t, get(h.url("api.test", "/v1/../admin")), 400, port.GuardRequest)
	wantDenial(t, get(h.url("api.test", "/v1/%2e%2e/admin")), 400, port.GuardRequest)
	wantDenial(t, get(h.url("api.test", "/v1/a%2fb")), 400, port.GuardRequest)
	// Unresolved placeholder, a name the provider does not list, CRLF value.
	for _, tc := range []struct{ hdr, want string }{{"{{missing}}", "{{missing}}"}, {"{{nope}}", "{{nope}}"}, {"{{crlf}}", "CR, LF or NUL"}} {
		req, _ := http.NewRequest("GET", h.url("api.test", "/v1/x"), nil)
		req.Header.Set("Authorization", "Bearer "+tc.hdr)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		if resp.StatusCode != 400 || !strings.Contains(b, `"guard":"placeholder"`) || !strings.Contains(b, tc.want) || strings.Contains(b, "X-Evil") {
			t.Fatalf("%s: %d %s", tc.hdr, resp.StatusCode, b)
		}
	}
	// Methods.
	req, _ := http.NewRequest("TRACE", "http://plain.test:"+h.plain.Port()+"/", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	wantDenial(t, resp, 403, port.GuardMethod)
	if n := len(h.up.Seen()) + len(h.plain.Seen()); n != 0 {
		t.Fatalf("denied requests reached an upstream: %d", n)
	}
	// Raw requests: userinfo, CONNECT to a non-allowlisted port or an IP literal,
	// and CONNECT relayed to a second proxy (a CONNECT for a host the policy lacks).
	for _, tc := range []struct {
		raw    string
		status int
		guard  string
	}{
		{"GET http://api.test@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", 400, port.GuardRequest},
		{"GET http://plain.test:" + h.plain.Port() + "@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", 400, port.GuardRequest},
		{"CONNECT api.test:22 HTTP/1.1\r\nHost: api.test:22\r\n\r\n", 403, port.GuardPort},
		{"CONNECT 127.0.0.1:" + h.up.Port() + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 403, port.GuardSSRF},
		{"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n", 403, port.GuardSSRF},
		{"CONNECT 93.184.216.34:443 HTTP/1.1\r\nHost: x\r\n\r\n", 403, port.GuardAllowlist},
		{"CONNECT api.test HTTP/1.1\r\nHost: api.test\r\n\r\n", 400, port.GuardRequest},
		{"GET file:///etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 403, port.GuardScheme},
		{"GET gopher://api.test:70/ HTTP/1.1\r\nHost: x\r\n\r\n", 403, port.GuardScheme},
		{"GET /proxy HTTP/1.1\r\nHost: x\r\nX-Provider: api\r\nX-Target: file:///etc/passwd\r\n\r\n", 403, port.GuardScheme},
		{"GET /proxy HTTP/1.1\r\nHost: x\r\nX-Provider: api\r\nX-Target: gopher://api.test/\r\n\r\n", 403, port.GuardScheme},
		{"GET /proxy HTTP/1.1\r\nHost: x\r\nX-Provider: api\r\nX-Target: ::not a url\r\n\r\n", 400, port.GuardRequest},
		{"GET /proxy HTTP/1.1\r\nHost: x\r\nX-Provider: api\r\nX-Target: /relative\r\n\r\n", 400, port.GuardRequest},
		{"GET /proxy HTTP/1.1\r\nHost: x\r\nX-Provider: other\r\nX-Target: " + h.url("api.test", "/v1/x") + "\r\n\r\n", 403, port.GuardAllowlist},
		{"GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n", 400, port.GuardRequest},
	} {
		conn, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, tc.raw)
		r, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: strings.Fields(tc.raw)[0]})
		if err != nil {
			t.Fatalf("%q: %v", tc.raw, err)
		}
		wantDenial(t, r, tc.status, tc.guard)
		conn.Close()
	}
	// Oversized headers get a clear status, not a hang.
	conn, _ := net.Dial("tcp", h.addr)
	fmt.Fprintf(conn, "GET http://plain.test/ HTTP/1.1\r\nHost: plain.test\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 200<<10))
	r, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized headers: %v %v", r, err)
	}
	conn.Close()
	for _, a := range h.p.Audit() {
		if a.Guard == "" || a.Status < 400 {
			t.Fatalf("a denial recorded as forwarded: %+v", a)
		}
	}
	h.checkNoCanary()
}

func TestEndpoint(t *testing.T) {
	h := newHarness(t, func(p *port.EgressPolicy) { p.ResponseLimit, p.ResponseCeiling = 64, 1024 })
	big := strings.Repeat("x", 5000)
	h.up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
		io.WriteString(w, string(b)+big)
	})
	call := func(max string, body string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", "http://"+h.addr+"/proxy", strings.NewReader(body))
		req.Header.Set("X-Provider", "api")
		req.Header.Set("X-Target", h.url("api.test", "/v1/items"))
		req.Header.Set("X-Substitute-Body", "true")
		req.Header.Set("Authorization", "Bearer {{token}}")
		if max != "" {
			req.Header.Set("X-Max-Response-Size", max)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, readAll(t, resp)
	}
	resp, body := call("", `{"key":"{{token}}"}`)
	seen := h.up.Seen()
	if resp.StatusCode != 200 || seen[0].Body != `{"key":"`+canary+`"}` || seen[0].Header.Get("X-Target") != "" || seen[0].Header.Get("X-Provider") != "" {
		t.Fatalf("%d %+v", resp.StatusCode, seen)
	}
	if len(body) != 64 || resp.Header.Get("X-Truncated") != "true" || !strings.HasPrefix(body, `{"key":"{{token}}"}`) {
		t.Fatalf("truncation: %q %v", body, resp.Header)
	}
	if resp.Header.Get("X-Echo-Auth") != "Bearer {{token}}" {
		t.Fatalf("reflected header: %q", resp.Header.Get("X-Echo-Auth"))
	}
	// A per-request limit, capped by the ceiling.
	_, body = call("100000", "a")
	if len(body) != 1024 {
		t.Fatalf("ceiling: %d", len(body))
	}
	_, body = call("10", "a")
	if len(body) != 10 {
		t.Fatalf("limit: %d", len(body))
	}
	a := h.p.Audit()
	if len(a) != 3 || a[0].Mode != "proxy" || !a[0].Truncated {
		t.Fatalf("audit %+v", a)
	}
	h.checkNoCanary()
}

// TestDomainFronting: the TLS server name and the request inside a terminated
// tunnel must both name the CONNECT host.
func TestDomainFronting(t *testing.T) {
	h := newHarness(t, nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.p.CAPEM())
	open := func(sni string) (*tls.Conn, error) {
		conn, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "CONNECT api.test:%s HTTP/1.1\r\nHost: api.test:%s\r\n\r\n", h.up.Port(), h.up.Port())
		br := bufio.NewReader(conn)
		r, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", r, err)
		}
		tc := tls.Client(conn, &tls.Config{ServerName: sni, RootCAs: pool, InsecureSkipVerify: sni != "api.test"})
		return tc, tc.Handshake()
	}
	if _, err := open("other.test"); err == nil {
		t.Fatal("SNI for another host was accepted")
	}
	tc, err := open("api.test")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	fmt.Fprintf(tc, "GET /v1/x HTTP/1.1\r\nHost: other.test:%s\r\n\r\n", h.up.Port())
	r, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantDenial(t, r, http.StatusMisdirectedRequest, port.GuardRequest)
	if len(h.up.Seen()) != 0 {
		t.Fatal("a fronted request reached the upstream")
	}
}

// TestTunnelOnly: a tunnel-only provider gets an opaque tunnel that the client
// verifies against the upstream's own certificate.
func TestTunnelOnly(t *testing.T) {
	h := newHarness(t, nil)
	resp, err := h.client().Get(h.url("tunnel.test", "/anything"))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(body, `"Path":"/anything"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	h.p.Close() // ends the idle tunnel, which then gets recorded
	a := h.p.Audit()
	if len(a) != 1 || a[0].Mode != "tunnel" || a[0].Provider != "tunnel" || a[0].ReqBytes == 0 || a[0].RespBytes == 0 {
		t.Fatalf("audit %+v", a)
	}
}

func TestRunByteCap(t *testing.T) {
	h := newHarness(t, func(p *port.EgressPolicy) { p.MaxRunBytes = 3000; p.MaxRequestBytes = 100 })
	big := strings.Repeat("y", 10000)
	h.plain.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) })
	c := h.client()
	u := "http://plain.test:" + h.plain.Port() + "/"
	resp, err := c.Post(u, "text/plain", strings.NewReader(strings.Repeat("z", 200)))
	if err != nil {
		t.Fatal(err)
	}
	wantDenial(t, resp, 413, port.GuardBytes)
	// Go's client retries an idempotent request whose connection broke before any
	// answer: the retry meets the spent cap. Either way the big body never arrives.
	resp, err = c.Get(u)
	var got []byte
	if err == nil {
		got, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil && strings.Contains(string(got), big) {
		t.Fatalf("a response over the run cap was delivered whole: %+v", h.p.Audit())
	}
	resp, err = c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	wantDenial(t, resp, 403, port.GuardBytes)
}

// feedChunks runs text through r in chunks of size bytes, then ends the stream.
func feedChunks(r *Redactor, text string, size int) (string, error) {
	var out []byte
	for i := 0; i < len(text); i += size {
		b, err := r.Feed([]byte(text[i:min(i+size, len(text))]), false)
		if err != nil {
			return string(out), err
		}
		out = append(out, b...)
	}
	b, err := r.Feed(nil, true)
	return string(append(out, b...)), err
}

func TestRedactorSplits(t *testing.T) {
	vals := map[string]string{"token": canary, "short": "abc", "k2": "zzzz-secret-two"}
	// canary[:10] is shorter than the run redacted in a value of its length (15).
	text := "start " + canary + " mid zzzz-secret-two end " + canary[:10] + " " + canary
	want := "start {{token}} mid {{k2}} end " + canary[:10] + " {{token}}"
	for size := 1; size <= len(text); size++ {
		r := NewRedactor(vals)
		out, err := feedChunks(r, text, size)
		if err != nil || out != want {
			t.Fatalf("chunk %d: %q %v", size, out, err)
		}
		if r.Count != 3 {
			t.Fatalf("count %d", r.Count)
		}
	}
	// Text that ends its lines is not held back.
	r := NewRedactor(vals)
	if got, _ := r.Feed([]byte("data: hello\n\n"), false); string(got) != "data: hello\n\n" {
		t.Fatalf("held back: %q", got)
	}
}

func TestPlaceholders(t *testing.T) {
	if got := Placeholders("a {{x}} {{ y }} {{{z}}} {{x}} {{bad name}} {{w-1.a_b}}"); strings.Join(got, ",") != "x,z,w-1.a_b" {
		t.Fatalf("%q", got)
	}
	vals := map[string]string{"x": "V/1", "z": "Z"}
	if got := Substitute("/{{x}}/{{{z}}}/{{q}}", vals, url.PathEscape); got != "/V%2F1/{Z}/{{q}}" {
		t.Fatalf("%q", got)
	}
}

func TestCompileRefuses(t *testing.T) {
	creds := port.CredentialFunc(func(context.Context, string, string, string) (string, error) { return "", nil })
	for name, p := range map[string]*port.EgressPolicy{
		"empty":         {},
		"ip literal":    {Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://127.0.0.1/"}}}},
		"file":          {Providers: []port.EgressProvider{{ID: "a", URIs: []string{"file:///etc"}}}},
		"userinfo":      {Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://u@a.test/"}}}},
		"dot segments":  {Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://a.test/x/../y"}}}},
		"bad id":        {Providers: []port.EgressProvider{{ID: "a b", URIs: []string{"https://a.test/"}}}},
		"dup id":        {Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://a.test/"}}, {ID: "a", URIs: []string{"https://b.test/"}}}},
		"no source":     {Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://a.test/"}, Credentials: []string{"t"}}}},
		"tunnel creds":  {Credentials: creds, Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://a.test/"}, Credentials: []string{"t"}, TunnelOnly: true}}},
		"tunnel http":   {Providers: []port.EgressProvider{{ID: "a", URIs: []string{"http://a.test/"}, TunnelOnly: true}}},
		"bad proxy":     {UpstreamProxy: "socks5://x", Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://a.test/"}}}},
		"bad port":      {Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://a.test:99999/"}}}},
		"negative caps": {MaxRunBytes: -1, Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://a.test/"}}}},
	} {
		if _, err := Compile(p); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestAmbiguous: two providers matching the same request are refused.
func TestAmbiguous(t *testing.T) {
	h := newHarness(t, func(p *port.EgressPolicy) {
		p.Providers = append(p.Providers, port.EgressProvider{ID: "dup", URIs: []string{"https://other.test:" + strings.Split(p.Providers[2].URIs[0], ":")[2]}})
	})
	resp, err := h.client().Get(h.url("other.test", "/x"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("ambiguous request went through")
	}
	a := h.p.Audit()
	if len(a) != 1 || a[0].Guard != port.GuardAmbiguous {
		t.Fatalf("audit %+v", a)
	}
}

// TestReflectedEscaped: a credential the upstream echoes percent-encoded is redacted
// too, and forward requests may opt in to body substitution.
func TestReflectedEscaped(t *testing.T) {
	const odd = "tok/en+with space&="
	h := newHarness(t, func(p *port.EgressPolicy) {
		p.Credentials = port.CredentialFunc(func(context.Context, string, string, string) (string, error) { return odd, nil })
	})
	req, _ := http.NewRequest("POST", h.url("api.test", "/v1/q?k={{token}}"), strings.NewReader(`{"t":"{{token}}"}`))
	req.Header.Set("X-Substitute-Body", "true")
	resp, err := h.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	seen := h.up.Seen()
	if len(seen) != 1 || seen[0].Body != `{"t":"`+odd+`"}` || seen[0].RawQuery != "k="+url.QueryEscape(odd) {
		t.Fatalf("upstream saw %+v", seen)
	}
	jsonForm, _ := json.Marshal(odd)
	if !strings.Contains(body, `{\"t\":\"{{token}}\"}`) {
		t.Fatalf("JSON-escaped echo not redacted: %s", body)
	}
	for _, form := range []string{odd, url.QueryEscape(odd), strings.Trim(string(jsonForm), `"`)} {
		if strings.Contains(body, form) {
			t.Fatalf("%q reflected in %s", form, body)
		}
	}
}

// TestRedirectsNotFollowed: a redirect reaches the agent as it is; the proxy never
// follows it, and the agent's next request is checked again.
func TestRedirectsNotFollowed(t *testing.T) {
	h := newHarness(t, nil)
	h.up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	c := h.client()
	resp, err := c.Get(h.url("api.test", "/v1/r"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "http://169.254.169.254/latest/meta-data/" || len(h.up.Seen()) != 1 {
		t.Fatalf("%d %v %d", resp.StatusCode, resp.Header, len(h.up.Seen()))
	}
	resp, err = c.Get(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	wantDenial(t, resp, 403, port.GuardSSRF)
}

// TestCloseLeavesNothing: after Close (with terminated and opaque tunnels still
// open) every tunnel is recorded, and once the run's servers are gone no goroutine
// of the proxy is left.
func TestCloseLeavesNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // only what the run started counts
	t.Run("run", func(t *testing.T) {                  // its cleanups (servers, upstreams) run at its end
		h := newHarness(t, nil)
		c := h.client()
		for _, u := range []string{h.url("api.test", "/v1/a"), h.url("tunnel.test", "/b")} {
			resp, err := c.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
		}
		h.p.Close()
		c.CloseIdleConnections()
		modes := map[string]int{}
		for _, r := range h.p.Audit() {
			modes[r.Mode]++
		}
		if modes["mitm"] != 1 || modes["tunnel"] != 1 {
			t.Fatalf("audit modes %v", modes)
		}
	})
}

// TestPlainHTTPInsideConnect: clients that tunnel http:// through CONNECT (Node's
// fetch does) are served for hosts with http rules, each request checked; the wrong
// protocol for a host's rules is refused.
func TestPlainHTTPInsideConnect(t *testing.T) {
	h := newHarness(t, nil)
	open := func(authority string) (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		br := bufio.NewReader(conn)
		r, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %v %v", authority, r, err)
		}
		return conn, br
	}
	plain := "plain.test:" + h.plain.Port()
	conn, br := open(plain)
	fmt.Fprintf(conn, "GET /in-tunnel HTTP/1.1\r\nHost: %s\r\nX-Key: {{token}}\r\n\r\n", plain)
	r, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, r)
	seen := h.plain.Seen()
	if r.StatusCode != 200 || len(seen) != 1 || seen[0].Header.Get("X-Key") != canary || strings.Contains(body, canary) {
		t.Fatalf("%d %s %+v", r.StatusCode, body, seen)
	}
	// Another host inside the same tunnel is refused.
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: api.test:%s\r\n\r\n", h.plain.Port())
	r, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantDenial(t, r, http.StatusMisdirectedRequest, port.GuardRequest)

	// Plain HTTP inside a tunnel to a host allowed for https only.
	api := "api.test:" + h.up.Port()
	conn, br = open(api)
	fmt.Fprintf(conn, "GET /v1/x HTTP/1.1\r\nHost: %s\r\n\r\n", api)
	r, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantDenial(t, r, 403, port.GuardPort)
	// TLS inside a tunnel to a host allowed for plain http only.
	conn, _ = open(plain)
	tc := tls.Client(conn, &tls.Config{ServerName: "plain.test", InsecureSkipVerify: true})
	if err := tc.Handshake(); err == nil {
		t.Fatal("TLS accepted in an http-only tunnel")
	}
	if len(h.up.Seen()) != 0 || len(h.plain.Seen()) != 1 {
		t.Fatal("a refused request reached an upstream")
	}
}

// noRateLimit lifts the run's request rate, for tests and benchmarks that send
// many requests on purpose.
func noRateLimit(p *port.EgressPolicy) { p.Rate = port.EgressRate{RPS: 1e9, Burst: 1 << 30} }
