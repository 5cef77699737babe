package inproc

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"

	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/port"
)

// Resolver looks host names up for the egress proxy; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// egressConfig is the manager-wide egress configuration.
type egressConfig struct {
	resolver      Resolver
	roots         *x509.CertPool // nil: system roots
	rootsPEM      []byte         // added to the agent's bundle (tunnel-only providers)
	unsafeAllow   []netip.Prefix
	upstreamProxy *url.URL
}

// systemBundles are where Linux distributions keep their CA bundle; the first found
// is appended to the agent's bundle, so tunnel-only providers verify as usual.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem", "/etc/pki/tls/cacert.pem", "/etc/ssl/cert.pem",
}

const maxBundleBytes = 4 << 20

// WithEgressResolver sets the resolver the egress proxy uses (default
// net.DefaultResolver). Every address it returns is still checked on each dial.
func WithEgressResolver(r Resolver) Option {
	return func(c *config) error {
		if r == nil {
			return port.Invalidf("egress resolver is nil")
		}
		c.egress.resolver = r
		return nil
	}
}

// WithEgressUpstreamRoots makes the egress proxy verify upstream TLS against these PEM
// certificates instead of the system roots, and adds them to the agent's CA bundle
// (for tunnel-only providers). Meant for private CAs and tests.
func WithEgressUpstreamRoots(pemCerts []byte) Option {
	return func(c *config) error {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemCerts) {
			return port.Invalidf("egress upstream roots: no PEM certificate")
		}
		c.egress.roots, c.egress.rootsPEM = pool, append([]byte(nil), pemCerts...)
		return nil
	}
}

// WithEgressUnsafeAllow exempts address ranges from the egress proxy's SSRF guard.
// It exists for tests whose upstreams listen on loopback; never use it in
// production: an allowlisted name that resolves into these ranges is dialled.
func WithEgressUnsafeAllow(prefixes ...netip.Prefix) Option {
	return func(c *config) error {
		for _, p := range prefixes {
			if !p.IsValid() {
				return port.Invalidf("egress unsafe allow: invalid prefix")
			}
		}
		c.egress.unsafeAllow = append(c.egress.unsafeAllow, prefixes...)
		return nil
	}
}

// WithEgressUpstreamProxy sends egress traffic through an http:// proxy by default
// (a run's EgressPolicy.UpstreamProxy beats it). The process's proxy variables are
// never used.
func WithEgressUpstreamProxy(proxyURL string) Option {
	return func(c *config) error {
		u, err := egress.ParseUpstreamProxy(proxyURL)
		if err != nil {
			return err
		}
		c.egress.upstreamProxy = u
		return nil
	}
}

// egressFront serves a run's egress socket.
type egressFront struct {
	px     *egress.Proxy
	srv    *http.Server
	served chan struct{}
}

func compileEgress(p *port.EgressPolicy) (*egress.Policy, error) {
	if p == nil {
		return nil, nil
	}
	return egress.Compile(p)
}

// startEgress makes the run's egress proxy and CA, writes the agent's CA bundle and
// serves the egress socket next to the LLM socket.
func (p *Proxy) startEgress(pol *egress.Policy) error {
	ec := p.m.cfg.egress
	cl := &egress.Classifier{Allow: ec.unsafeAllow, Self: egress.HostAddrs()}
	cfg := egress.Config{RunID: p.spec.RunID, Policy: pol, Classifier: cl, RootCAs: ec.roots,
		UpstreamProxy: ec.upstreamProxy, Logger: p.log}
	if ec.resolver != nil {
		cfg.Resolver = ec.resolver
	}
	px, err := egress.New(cfg)
	if err != nil {
		return internal("egress proxy: %w", err)
	}
	bundle := px.CAPEM()
	bundle = append(bundle, ec.rootsPEM...)
	bundle = append(bundle, systemRoots()...)
	if err := os.WriteFile(filepath.Join(p.dir, port.EgressCAName), bundle, 0o644); err != nil {
		return internal("write egress CA bundle: %w", err)
	}
	sock := filepath.Join(p.dir, port.EgressSocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return internal("listen on %s: %w", sock, err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		_ = ln.Close()
		return internal("chmod egress socket: %w", err)
	}
	var l net.Listener = ln
	if uid := p.m.cfg.sandboxUID; uid >= 0 {
		l = &peerListener{Listener: l, p: p, allowed: [2]int{uid, os.Geteuid()}}
	}
	l = llmproxy.LimitListener(l, p.m.cfg.connsPerRun, p.m.conns)
	f := &egressFront{px: px, srv: px.NewServer(), served: make(chan struct{})}
	go func() {
		defer close(f.served)
		if err := f.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("inproc: egress serve", slog.Any("err", err))
		}
	}()
	p.egress = f
	return nil
}

func systemRoots() []byte {
	for _, path := range systemBundles {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(f, maxBundleBytes))
		f.Close()
		if err == nil && len(b) > 0 {
			return append([]byte("\n"), b...)
		}
	}
	return nil
}

// stopEgress stops the egress front: new connections first, then tunnels.
func (p *Proxy) stopEgress(ctx context.Context) {
	f := p.egress
	if f == nil {
		return
	}
	if err := f.srv.Shutdown(ctx); err != nil {
		_ = f.srv.Close()
	}
	f.px.Close() // hijacked connections (tunnels) are not the server's to close
	<-f.served
}

// EgressAudit implements port.EgressAuditor: the run's egress records so far, also
// after Stop; nil without an egress policy.
func (p *Proxy) EgressAudit() []port.EgressRecord {
	if p.egress == nil {
		return nil
	}
	return p.egress.px.Audit()
}

var _ port.EgressAuditor = (*Proxy)(nil)
