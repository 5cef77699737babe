// Package egress is the egress front of the proxy engine: a per-run HTTP/HTTPS
// forward proxy and /proxy endpoint with a default-deny allowlist, credential
// placeholders resolved on the host, TLS termination with a per-run CA for
// allowlisted hosts, an SSRF guard on every dial, and an audit record per request.
//
// A Proxy serves one run; the front that owns the run's socket (adapters/inproc)
// hands it the connections that arrive there, so the socket is the run's identity.
package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Limits of the proxy itself.
const (
	maxAuditRecords   = 10000
	maxHeaderBytes    = 64 << 10
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 60 * time.Second
	dialTimeout       = 10 * time.Second
	// EndpointPath is the explicit endpoint: X-Provider, X-Target, X-Substitute-Body.
	EndpointPath = "/proxy"
)

// Config configures a Proxy. RunID and Policy are required.
type Config struct {
	RunID  string
	Policy *Policy
	// Classifier decides which addresses may be dialled; nil: the built-in rules
	// with the host's own addresses as Self.
	Classifier *Classifier
	// Resolver looks names up; nil: net.DefaultResolver. The proxy never uses the
	// process's proxy variables.
	Resolver Resolver
	// RootCAs verify upstream TLS; nil: the system roots.
	RootCAs *x509.CertPool
	// UpstreamProxy is the manager's default upstream proxy; the policy's beats it.
	UpstreamProxy *url.URL
	// CAValidity is how long the run's CA is valid (default a week: longer than any
	// run; the CA dies with the run anyway).
	CAValidity time.Duration
	Logger     *slog.Logger
}

// Proxy is one run's egress proxy. It is an http.Handler; serve it with
// NewServer on the run's egress socket. Safe for concurrent use.
type Proxy struct {
	cfg       Config
	pol       *Policy
	ca        *CA
	dialer    *Dialer
	transport *http.Transport
	log       *slog.Logger

	upstream               string // host:port of the upstream proxy; "" for none
	maxReq, maxRun         int64
	respLimit, respCeiling int64
	runBytes               atomic.Int64

	mu       sync.Mutex
	audit    []port.EgressRecord
	dropped  int
	hijacked map[net.Conn]struct{}
	closed   bool
	tunnels  sync.WaitGroup
}

// New makes a run's proxy and its CA (in memory).
func New(cfg Config) (*Proxy, error) {
	if cfg.Policy == nil || cfg.RunID == "" {
		return nil, port.Invalidf("egress: run id and policy are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Classifier == nil {
		cfg.Classifier = &Classifier{Self: HostAddrs()}
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.CAValidity <= 0 {
		cfg.CAValidity = 7 * 24 * time.Hour
	}
	ca, err := NewCA(cfg.RunID, cfg.CAValidity)
	if err != nil {
		return nil, err
	}
	src := cfg.Policy.src
	p := &Proxy{cfg: cfg, pol: cfg.Policy, ca: ca, log: cfg.Logger, hijacked: map[net.Conn]struct{}{},
		maxReq: orDefault(src.MaxRequestBytes, port.DefaultEgressMaxRequestBytes), maxRun: orDefault(src.MaxRunBytes, port.DefaultEgressMaxRunBytes),
		respLimit: orDefault(src.ResponseLimit, port.DefaultEgressResponseLimit), respCeiling: orDefault(src.ResponseCeiling, port.DefaultEgressResponseCeiling)}
	if p.respLimit > p.respCeiling {
		p.respCeiling = p.respLimit
	}
	p.dialer = &Dialer{Classifier: cfg.Classifier, Resolver: cfg.Resolver, Timeout: dialTimeout}
	up := cfg.UpstreamProxy
	if src.UpstreamProxy != "" {
		if up, err = ParseUpstreamProxy(src.UpstreamProxy); err != nil {
			return nil, err
		}
	}
	p.transport = &http.Transport{
		DialContext:            p.dialer.DialContext,
		TLSClientConfig:        &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    dialTimeout,
		DisableCompression:     true,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
		ExpectContinueTimeout:  time.Second,
	}
	if up != nil {
		// The host chose this proxy: it is dialled as is, and nothing else is. Targets
		// are checked here first (precheck), resolved by this process.
		p.upstream = up.Host
		if up.Port() == "" {
			p.upstream = net.JoinHostPort(up.Hostname(), "80")
		}
		nd := &net.Dialer{Timeout: dialTimeout}
		p.transport.Proxy = http.ProxyURL(up)
		p.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != p.upstream {
				return nil, errors.New("egress: only the upstream proxy is dialled")
			}
			return nd.DialContext(ctx, network, addr)
		}
	}
	return p, nil
}

func orDefault(v, d int64) int64 {
	if v > 0 {
		return v
	}
	return d
}

// CAPEM is the run's CA certificate in PEM form (never its key).
func (p *Proxy) CAPEM() []byte { return p.ca.PEM() }

// NewServer returns the http.Server that serves p on a listener.
func (p *Proxy) NewServer() *http.Server {
	return &http.Server{
		Handler:           p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
}

// Audit returns a copy of the records so far.
func (p *Proxy) Audit() []port.EgressRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]port.EgressRecord(nil), p.audit...)
}

// Close cuts every tunnel and terminated-TLS connection, waits for them to be
// recorded, and closes idle upstream connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.hijacked {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.tunnels.Wait()
	p.transport.CloseIdleConnections()
}

func (p *Proxy) record(rec port.EgressRecord) {
	rec.RunID = p.cfg.RunID
	p.mu.Lock()
	if len(p.audit) < maxAuditRecords {
		p.audit = append(p.audit, rec)
	} else {
		p.dropped++
	}
	p.mu.Unlock()
	if f := p.pol.src.OnAudit; f != nil {
		f(rec)
	}
	p.log.Debug("egress", slog.String("mode", rec.Mode), slog.String("host", rec.Host), slog.Int("status", rec.Status), slog.String("guard", rec.Guard))
}

// ServeHTTP dispatches: CONNECT, absolute-form forward requests, and /proxy.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		p.serveConnect(w, r)
	case r.URL.IsAbs():
		p.serveForward(w, r, "forward", r.URL, "", false, 0)
	case r.URL.Path == EndpointPath:
		p.serveEndpoint(w, r)
	case r.URL.Path == "/health":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	default:
		p.deny(w, port.EgressRecord{Time: time.Now().UTC(), Mode: "forward", Method: clip(r.Method, 16)},
			&port.EgressDenial{Status: http.StatusBadRequest, Guard: port.GuardRequest, Message: "not a proxy request: use an absolute URL, CONNECT, or " + EndpointPath})
	}
}

// deny answers with the JSON denial and records it.
func (p *Proxy) deny(w http.ResponseWriter, rec port.EgressRecord, d *port.EgressDenial) {
	rec.Status, rec.Guard = d.Status, d.Guard
	if rec.Latency == 0 && !rec.Time.IsZero() {
		rec.Latency = time.Since(rec.Time)
	}
	p.record(rec)
	writeDenial(w, d)
}

func writeDenial(w http.ResponseWriter, d *port.EgressDenial) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{
		"type": "egress_denied", "guard": d.Guard, "target": d.Target, "message": d.Message,
	}})
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Egress-Guard", d.Guard)
	w.WriteHeader(d.Status)
	_, _ = w.Write(append(body, '\n'))
}

func (p *Proxy) serveEndpoint(w http.ResponseWriter, r *http.Request) {
	rec := port.EgressRecord{Time: time.Now().UTC(), Mode: "proxy", Method: clip(r.Method, 16)}
	prov, raw := r.Header.Get("X-Provider"), r.Header.Get("X-Target")
	if prov == "" || raw == "" {
		p.deny(w, rec, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Message: "X-Provider and X-Target are required"})
		return
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() {
		p.deny(w, rec, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Message: "X-Target is not an absolute URL"})
		return
	}
	limit := p.respLimit
	if s := r.Header.Get("X-Max-Response-Size"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			p.deny(w, rec, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Message: "X-Max-Response-Size is not a positive integer"})
			return
		}
		limit = min(n, p.respCeiling)
	}
	subst := strings.EqualFold(r.Header.Get("X-Substitute-Body"), "true")
	p.serveForward(w, r, "proxy", u, prov, subst, limit)
}

// target is a checked destination.
type target struct {
	scheme, host string
	port         int
	path         string // decoded, for matching
	escPath      string // template, escaped
	rawQuery     string // template
}

func (t *target) hostPort() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// display is the destination as audited: placeholders in template form, query values
// redacted.
func (t *target) display() string { return clip(t.escPath+redactQuery(t.rawQuery), 512) }

func redactQuery(q string) string {
	if q == "" {
		return ""
	}
	parts := strings.Split(q, "&")
	for i, kv := range parts {
		if k, _, ok := strings.Cut(kv, "="); ok {
			parts[i] = k + "=REDACTED"
		}
	}
	return "?" + strings.Join(parts, "&")
}

// checkTarget normalises and checks a URL's scheme, user info, host and path.
func (p *Proxy) checkTarget(u *url.URL) (*target, *port.EgressDenial) {
	shown := clip(u.Scheme+"://"+u.Host, 256)
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return nil, &port.EgressDenial{Status: 403, Guard: port.GuardScheme, Target: clip(scheme, 32) + ":", Message: "only http and https are proxied"}
	}
	if u.User != nil {
		return nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: scheme + "://", Message: "URLs with user info are refused"}
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: shown, Message: "the URL has no host"}
	}
	t := &target{scheme: scheme, port: defaultPort(scheme)}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: shown, Message: "bad port"}
		}
		t.port = n
	}
	if d := p.checkHost(u.Hostname(), t, shown); d != nil {
		return nil, d
	}
	t.escPath = u.EscapedPath()
	if t.escPath == "" {
		t.escPath = "/"
	}
	t.path = u.Path
	if t.path == "" {
		t.path = "/"
	}
	low := strings.ToLower(t.escPath)
	if !cleanPath(t.path) || strings.Contains(low, "%2f") || strings.Contains(low, "%5c") || strings.Contains(low, "%2e") || strings.Contains(low, "%00") {
		return nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: shown, Message: "the path is not canonical (dot segments, doubled or escaped slashes)"}
	}
	t.rawQuery = u.RawQuery
	return t, nil
}

// checkHost normalises a host into t, refusing IP literals (ssrf when internal,
// allowlist otherwise: a policy names hosts, never addresses).
func (p *Proxy) checkHost(h string, t *target, shown string) *port.EgressDenial {
	name, ip, err := ParseHost(h)
	if err != nil {
		return &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: shown, Message: "bad host"}
	}
	if ip.IsValid() {
		// Without the test exception: a literal never matches a provider anyway, and
		// the agent learns which guard it met.
		strict := Classifier{Self: p.cfg.Classifier.Self}
		if cl := strict.Classify(ip); cl != ClassAllowed {
			return &port.EgressDenial{Status: 403, Guard: port.GuardSSRF, Target: shown, Message: "the destination is an internal address (" + string(cl) + ")"}
		}
		return &port.EgressDenial{Status: 403, Guard: port.GuardAllowlist, Target: shown, Message: "IP literals are never on the allowlist"}
	}
	t.host = name
	return nil
}

// allowedMethods are forwarded; others (TRACE, CONNECT inside a tunnel, made-up
// ones) are refused.
var allowedMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true}

// hop-by-hop and reserved request headers, never forwarded from the agent.
var droppedReqHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Forwarded", "Via", "X-Real-Ip",
	"X-Provider", "X-Target", "X-Substitute-Body", "X-Max-Response-Size", "X-Proxy"}

var droppedRespHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func cleanRequestHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range droppedReqHeaders {
		h.Del(k)
	}
	for k := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-forwarded-") || strings.HasPrefix(lk, "proxy-") {
			delete(h, k)
		}
	}
}

// unbrace turns escaped braces back into braces, so {{name}} is found in URLs
// whatever the client escaped.
var unbrace = strings.NewReplacer("%7B", "{", "%7b", "{", "%7D", "}", "%7d", "}")

// serveForward is the one enforcement path of every request with a known URL:
// checks, placeholders, forwarding, reflection guard, byte caps and audit. mode is
// "forward", "proxy" or "mitm"; want is the endpoint's X-Provider; limit > 0
// truncates the response (the endpoint).
func (p *Proxy) serveForward(w http.ResponseWriter, r *http.Request, mode string, u *url.URL, want string, substBody bool, limit int64) {
	rec := port.EgressRecord{Time: time.Now().UTC(), Mode: mode, Method: clip(r.Method, 16)}
	t, d := p.checkTarget(u)
	if d != nil {
		p.deny(w, rec, d)
		return
	}
	rec.Scheme, rec.Host, rec.Path = t.scheme, clip(t.host, 256), t.display()
	if mode == "mitm" && t.scheme != "https" {
		p.deny(w, rec, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: t.host, Message: "plain http inside a TLS tunnel"})
		return
	}
	if !allowedMethods[r.Method] {
		p.deny(w, rec, &port.EgressDenial{Status: 403, Guard: port.GuardMethod, Target: t.host, Message: "method " + clip(r.Method, 16) + " is not proxied"})
		return
	}
	pr, d := p.pol.match(t.scheme, t.host, t.port, t.path, true, want, t.host)
	if d != nil {
		p.deny(w, rec, d)
		return
	}
	rec.Provider = pr.id
	if pr.tunnelOnly {
		p.deny(w, rec, &port.EgressDenial{Status: 403, Guard: port.GuardAllowlist, Target: t.host, Message: "the provider is tunnel-only: reach it with CONNECT"})
		return
	}
	if p.runBytes.Load() >= p.maxRun {
		p.deny(w, rec, &port.EgressDenial{Status: 403, Guard: port.GuardBytes, Target: t.host, Message: "the run's egress byte cap is reached"})
		return
	}
	h := r.Header.Clone()
	cleanRequestHeaders(h)
	escPath, rawQuery := unbrace.Replace(t.escPath), unbrace.Replace(t.rawQuery)
	names := Placeholders(escPath + "\n" + rawQuery)
	for _, vs := range h {
		for _, v := range vs {
			for _, n := range Placeholders(v) {
				if !contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	// Body substitution is opt-in, on every way in (the endpoint reads the header
	// before this; curl can send it through the forward proxy too).
	substBody = substBody || strings.EqualFold(r.Header.Get("X-Substitute-Body"), "true")
	var body []byte
	if substBody && r.Body != nil && r.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, p.maxReq+1))
		if err != nil {
			p.deny(w, rec, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: t.host, Message: "the request body could not be read"})
			return
		}
		if int64(len(body)) > p.maxReq {
			p.deny(w, rec, &port.EgressDenial{Status: 413, Guard: port.GuardBytes, Target: t.host, Message: "the request body is over the per-request cap"})
			return
		}
		for _, n := range Placeholders(string(body)) {
			if !contains(names, n) {
				names = append(names, n)
			}
		}
	}
	// A provider with credentials gets them only through placeholders: credential
	// headers the agent wrote out in full are dropped.
	if len(pr.creds) > 0 {
		for _, k := range []string{"Authorization", "Cookie"} {
			if v := h.Get(k); v != "" && len(Placeholders(v)) == 0 {
				h.Del(k)
			}
		}
	}
	vals, d := resolve(r.Context(), p.pol.src.Credentials, p.cfg.RunID, pr, names, t.host)
	if d != nil {
		p.deny(w, rec, d)
		return
	}
	for k, vs := range h {
		for i, v := range vs {
			vs[i] = Substitute(v, vals, nil)
		}
		h[k] = vs
	}
	red := NewRedactor(vals)
	if red != nil {
		h.Del("Accept-Encoding") // the reflection guard reads plain bodies
	}
	outURL := t.scheme + "://" + t.hostPort() + Substitute(escPath, vals, url.PathEscape)
	if rawQuery != "" {
		outURL += "?" + Substitute(rawQuery, vals, url.QueryEscape)
	}
	ou, err := url.Parse(outURL)
	if err != nil || ou.Host != t.hostPort() {
		p.deny(w, rec, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: t.host, Message: "the URL is malformed after substitution"})
		return
	}
	ctx := r.Context()
	out := (&http.Request{Method: r.Method, URL: ou, Header: h, Host: ou.Host, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(ctx)
	cnt := &countReader{p: p}
	switch {
	case body != nil:
		b := []byte(Substitute(string(body), vals, nil))
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		rec.ReqBytes = int64(len(b))
		p.runBytes.Add(int64(len(b)))
	case r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0:
		if r.ContentLength > p.maxReq {
			p.deny(w, rec, &port.EgressDenial{Status: 413, Guard: port.GuardBytes, Target: t.host, Message: "the request body is over the per-request cap"})
			return
		}
		cnt.r, cnt.max = r.Body, p.maxReq
		out.Body, out.ContentLength = io.NopCloser(cnt), r.ContentLength
	default:
		out.Body = http.NoBody
	}
	if d := p.precheck(ctx, t.host, t.host); d != nil {
		p.deny(w, rec, d)
		return
	}
	resp, err := p.transport.RoundTrip(out)
	rec.ReqBytes += cnt.n
	if err != nil {
		if cnt.err != nil {
			p.deny(w, rec, &port.EgressDenial{Status: 413, Guard: port.GuardBytes, Target: t.host, Message: cnt.err.Error()})
			return
		}
		if dd := denyFor(err, t.host); dd != nil {
			p.deny(w, rec, dd)
			return
		}
		rec.Status, rec.Error, rec.Latency = http.StatusBadGateway, clip(red.String(err.Error()), 256), time.Since(rec.Time)
		p.record(rec)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, `{"error":{"type":"egress_upstream_error","message":"the upstream could not be reached"}}`+"\n")
		return
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	wh := w.Header()
	for k, vs := range resp.Header {
		for _, v := range vs {
			wh.Add(k, red.String(v))
		}
	}
	for _, k := range droppedRespHeaders {
		wh.Del(k)
	}
	var src io.Reader = resp.Body
	if red != nil {
		wh.Del("Content-Length")
		src = &redactReader{r: resp.Body, red: red}
	}
	defer func() {
		if red != nil {
			rec.Reflected = red.Count
		}
		rec.Latency = time.Since(rec.Time)
		p.record(rec)
	}()
	if limit > 0 {
		buf, err := io.ReadAll(io.LimitReader(src, limit+1))
		if int64(len(buf)) > limit {
			buf, rec.Truncated = buf[:limit], true
			wh.Set("X-Truncated", "true")
		}
		wh.Set("Content-Length", strconv.Itoa(len(buf)))
		w.WriteHeader(resp.StatusCode)
		n, _ := w.Write(buf)
		rec.RespBytes = int64(n)
		p.runBytes.Add(int64(n))
		if err != nil {
			rec.Error = "upstream body: " + clip(red.String(err.Error()), 200)
		}
		return
	}
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if p.runBytes.Add(int64(n)) > p.maxRun {
				rec.Error, rec.Guard = "the run's egress byte cap was reached mid-response", port.GuardBytes
				panic(http.ErrAbortHandler)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				rec.Error = "client gone"
				return
			}
			rec.RespBytes += int64(n)
			if fl != nil {
				fl.Flush()
			}
		}
		if rerr != nil {
			if rerr != io.EOF {
				rec.Error = "upstream body: " + clip(red.String(rerr.Error()), 200)
			}
			return
		}
	}
}

// countReader counts a request body against the per-request and per-run caps.
type countReader struct {
	p   *Proxy
	r   io.Reader
	n   int64
	max int64
	err error
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if c.n > c.max {
		c.err = errors.New("the request body is over the per-request cap")
		return 0, c.err
	}
	if c.p.runBytes.Add(int64(n)) > c.p.maxRun {
		c.err = errors.New("the run's egress byte cap is reached")
		return 0, c.err
	}
	return n, err
}

// redactReader runs a body through a Redactor.
type redactReader struct {
	r    io.Reader
	red  *Redactor
	buf  []byte
	out  []byte
	done bool
}

func (rr *redactReader) Read(b []byte) (int, error) {
	if rr.buf == nil {
		rr.buf = make([]byte, 32<<10)
	}
	for len(rr.out) == 0 {
		if rr.done {
			return 0, io.EOF
		}
		n, err := rr.r.Read(rr.buf)
		final := err != nil
		rr.out = append(rr.out, rr.red.Feed(rr.buf[:n], final)...)
		if err != nil {
			rr.done = true
			if err != io.EOF {
				if len(rr.out) == 0 {
					return 0, err
				}
			}
		}
	}
	n := copy(b, rr.out)
	rr.out = rr.out[n:]
	return n, nil
}

// serveConnect handles CONNECT host:port: a plain tunnel for tunnel-only providers,
// TLS terminated with the run's CA otherwise.
func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request) {
	rec := port.EgressRecord{Time: time.Now().UTC(), Mode: "tunnel", Method: "CONNECT", Scheme: "https"}
	hostS, portS, err := net.SplitHostPort(r.Host)
	if err != nil {
		p.deny(w, rec, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: clip(r.Host, 256), Message: "CONNECT needs host:port"})
		return
	}
	portN, err := strconv.Atoi(portS)
	if err != nil || portN < 1 || portN > 65535 {
		p.deny(w, rec, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: clip(r.Host, 256), Message: "bad port"})
		return
	}
	t := &target{scheme: "https", port: portN}
	if strings.Contains(hostS, ":") {
		hostS = "[" + hostS + "]"
	}
	if d := p.checkHost(hostS, t, clip(r.Host, 256)); d != nil {
		p.deny(w, rec, d)
		return
	}
	rec.Host = t.host
	pr, d := p.pol.match("https", t.host, t.port, "", false, "", t.hostPort())
	if d != nil {
		p.deny(w, rec, d)
		return
	}
	rec.Provider = pr.id
	hj, ok := w.(http.Hijacker)
	if !ok {
		p.deny(w, rec, &port.EgressDenial{Status: 500, Guard: port.GuardRequest, Message: "the connection cannot be taken over"})
		return
	}
	var up net.Conn
	if pr.tunnelOnly {
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
	p.mitm(client, t)
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
func (p *Proxy) mitm(client net.Conn, t *target) {
	var sniBad atomic.Bool
	tc := tls.Server(client, &tls.Config{
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
		}
		_ = tc.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	authority := t.hostPort()
	srv := &http.Server{
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u := *r.URL
			if !u.IsAbs() {
				u.Scheme, u.Host = "https", r.Host
			}
			// Domain fronting: the inner request must name the tunnel's host and port.
			ht := &target{port: 443}
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
			if herr != nil || name != t.host || ht.port != t.port || strings.ToLower(u.Scheme) != "https" {
				p.deny(w, port.EgressRecord{Time: time.Now().UTC(), Mode: "mitm", Method: clip(r.Method, 16), Scheme: "https", Host: t.host},
					&port.EgressDenial{Status: http.StatusMisdirectedRequest, Guard: port.GuardRequest, Target: authority, Message: "the request inside the tunnel names another host than the CONNECT"})
				return
			}
			u.Host = authority
			p.serveForward(w, r, "mitm", &u, "", false, 0)
		}),
	}
	ln := newOneConnListener(tc)
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

// precheck resolves and checks a target that an upstream proxy will dial (without
// one, the dial hook checks every connection instead).
func (p *Proxy) precheck(ctx context.Context, host, shown string) *port.EgressDenial {
	if p.upstream == "" {
		return nil
	}
	err := p.resolveCheck(ctx, host)
	if err == nil {
		return nil
	}
	if d := denyFor(err, shown); d != nil {
		return d
	}
	return &port.EgressDenial{Status: http.StatusBadGateway, Guard: port.GuardSSRF, Target: shown, Message: "the destination could not be resolved"}
}

// resolveCheck resolves host and refuses it if any of its addresses is refused.
func (p *Proxy) resolveCheck(ctx context.Context, host string) error {
	addrs, err := p.cfg.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return err
	}
	if len(addrs) == 0 {
		return errors.New("egress: no address")
	}
	for _, a := range addrs {
		if cl := p.cfg.Classifier.Classify(a); cl != ClassAllowed && cl != ClassAllowedByTest {
			return &DenyError{Addr: a.WithZone("").Unmap(), Class: cl}
		}
	}
	return nil
}

// dialTunnel connects a tunnel-only CONNECT: through the upstream proxy (its own
// CONNECT) when there is one, else directly through the checking dialer.
func (p *Proxy) dialTunnel(ctx context.Context, t *target) (net.Conn, error) {
	if p.upstream == "" {
		return p.dialer.DialContext(ctx, "tcp", t.hostPort())
	}
	if err := p.resolveCheck(ctx, t.host); err != nil {
		return nil, err
	}
	c, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, "tcp", p.upstream)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(dialTimeout))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", t.hostPort(), t.hostPort()); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("egress: upstream proxy answered CONNECT with %d", resp.StatusCode)
	}
	_ = c.SetDeadline(time.Time{})
	if n := br.Buffered(); n > 0 {
		pre, _ := br.Peek(n)
		return &prefixConn{Conn: c, pre: append([]byte(nil), pre...)}, nil
	}
	return c, nil
}
