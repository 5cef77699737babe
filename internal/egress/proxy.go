// Package egress is the egress front of the proxy engine: a per-run HTTP/HTTPS
// forward proxy and /proxy endpoint with a default-deny allowlist, credential
// placeholders resolved on the host, TLS termination with a per-run CA for
// allowlisted hosts, an SSRF guard on every dial, and an audit record per request.
//
// A Proxy serves one run; the front that owns the run's socket (adapters/inprocproxy)
// hands it the connections that arrive there, so the socket is the run's identity.
package egress

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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

	"golang.org/x/time/rate"

	"github.com/agentsandbox/sandbox/port"
)

// Limits of the proxy itself.
const (
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
	maxRequests            int64
	requests               atomic.Int64  // sent upstream
	lim                    *rate.Limiter // every request the run makes
	// withdrawn is set when a response reflected part of a credential: the run's
	// later requests that carry one are refused (see reflect.go).
	withdrawn atomic.Bool
	// compiled are the run's credential values compiled for the reflection guard.
	compiled Compiled

	mu       sync.Mutex
	audit    auditLog
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
	p.maxRequests = int64(src.MaxRequests)
	if p.maxRequests == 0 {
		p.maxRequests = port.DefaultEgressMaxRequests
	}
	rl := src.Rate
	if rl.RPS == 0 {
		rl = port.DefaultEgressRate
	}
	p.lim = rate.NewLimiter(rate.Limit(rl.RPS), max(rl.Burst, 1))
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
		// The host chose this proxy: it is dialled as is, and nothing else is. It is
		// asked to CONNECT to addresses checked here, never to names (upstream.go).
		p.upstream = up.Host
		if up.Port() == "" {
			p.upstream = net.JoinHostPort(up.Hostname(), "80")
		}
		p.transport.DialContext = p.dialUpstream
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
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	p.parseAudit(srv, port.EgressRecord{Mode: "forward"}, nil)
	return srv
}

// Audit returns a copy of the records so far.
func (p *Proxy) Audit() []port.EgressRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.audit.records()
}

// Summary says how many records were written and which were summarised away.
func (p *Proxy) Summary() port.EgressSummary {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.audit.summary()
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
	p.audit.add(rec)
	p.mu.Unlock()
	if f := p.pol.src.OnAudit; f != nil {
		f(rec)
	}
	p.log.Debug("egress", slog.String("mode", rec.Mode), slog.String("host", rec.Host), slog.Int("status", rec.Status), slog.String("guard", rec.Guard))
}

// ServeHTTP dispatches: CONNECT, absolute-form forward requests, and /proxy.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	handled(r)
	if r.URL.Path != "/health" && !p.allow(w, r, "forward") {
		return
	}
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
		p.deny(w, port.EgressRecord{Time: time.Now().UTC(), Mode: "forward", Method: clip(r.Method, 16), Host: clip(strings.ToLower(r.Host), 256),
			Path: clip(r.URL.EscapedPath()+redactQuery(r.URL.RawQuery), 512)},
			&port.EgressDenial{Status: http.StatusBadRequest, Guard: port.GuardRequest, Message: "not a proxy request: use an absolute URL, CONNECT, or " + EndpointPath})
	}
}

// allow takes one request from the run's rate limit, or refuses it (429 with
// Retry-After, guard rate).
func (p *Proxy) allow(w http.ResponseWriter, r *http.Request, mode string) bool {
	now := time.Now()
	res := p.lim.ReserveN(now, 1)
	wait := res.DelayFrom(now)
	if res.OK() && wait == 0 {
		return true
	}
	res.CancelAt(now)
	rec := port.EgressRecord{Time: now.UTC(), Mode: mode, Method: clip(r.Method, 16)}
	if r.Method == http.MethodConnect {
		rec.Mode, rec.Scheme, rec.Host = "tunnel", "https", clip(strings.ToLower(r.Host), 256)
	} else if r.URL.IsAbs() {
		shownTarget(&rec, r.URL)
	}
	secs := int(wait/time.Second) + 1
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	p.deny(w, rec, &port.EgressDenial{Status: http.StatusTooManyRequests, Guard: port.GuardRate,
		Message: "the run's egress request rate is exceeded; retry after " + strconv.Itoa(secs) + "s"})
	return false
}

// sendOne counts one request sent upstream against the run's request cap.
func (p *Proxy) sendOne(target string) *port.EgressDenial {
	if p.requests.Add(1) > p.maxRequests {
		return &port.EgressDenial{Status: http.StatusTooManyRequests, Guard: port.GuardRequests, Target: target,
			Message: "the run's egress request cap (" + strconv.FormatInt(p.maxRequests, 10) + " requests) is spent"}
	}
	return nil
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
	retry := h.Get("Retry-After")
	for k := range h {
		delete(h, k)
	}
	if d.Guard == port.GuardRate && retry != "" {
		h.Set("Retry-After", retry)
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
