package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"

	"github.com/agentsandbox/sandbox/port"
)

// Host is the egress configuration of whatever serves runs' egress sockets (the
// in-process proxy manager, the shared daemon): the same for every run it serves.
type Host struct {
	// Resolver looks names up; nil: net.DefaultResolver.
	Resolver Resolver
	// Roots verify upstream TLS (nil: system roots); RootsPEM is added to the
	// agent's bundle so tunnel-only providers verify as usual.
	Roots    *x509.CertPool
	RootsPEM []byte
	// UnsafeAllow exempts ranges from the SSRF guard (tests only).
	UnsafeAllow []netip.Prefix
	// UpstreamProxy is the default upstream proxy; a run's policy beats it.
	UpstreamProxy *url.URL
}

// FrontConfig is one run's egress front.
type FrontConfig struct {
	RunID  string
	Policy *Policy
	// Dir is the run's socket directory: EgressSocketName and EgressCAName go there.
	Dir string
	// Wrap, if set, wraps the socket's listener (peer checks, connection limits).
	Wrap   func(net.Listener) net.Listener
	Logger *slog.Logger
}

// Front is a run's egress proxy served on its socket.
type Front struct {
	px     *Proxy
	srv    *http.Server
	served chan struct{}
}

// systemBundles are where Linux distributions keep their CA bundle; the first found
// is appended to the agent's bundle, so tunnel-only providers verify as usual.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem", "/etc/pki/tls/cacert.pem", "/etc/ssl/cert.pem",
}

const maxBundleBytes = 4 << 20

// StartFront makes the run's egress proxy and CA (in memory), writes the agent's CA
// bundle (the run's CA certificate, the host's extra roots, the system roots) and
// serves EgressSocketName in cfg.Dir (mode 0666: the sandbox's user connects; the
// directory and Wrap's checks guard it).
func (h Host) StartFront(cfg FrontConfig) (*Front, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cl := &Classifier{Allow: h.UnsafeAllow, Self: HostAddrs()}
	px, err := New(Config{RunID: cfg.RunID, Policy: cfg.Policy, Classifier: cl, Resolver: h.Resolver, RootCAs: h.Roots,
		UpstreamProxy: h.UpstreamProxy, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	bundle := px.CAPEM()
	bundle = append(bundle, h.RootsPEM...)
	bundle = append(bundle, systemRoots()...)
	if err := os.WriteFile(filepath.Join(cfg.Dir, port.EgressCAName), bundle, 0o644); err != nil {
		return nil, fmt.Errorf("write egress CA bundle: %w", err)
	}
	sock := filepath.Join(cfg.Dir, port.EgressSocketName)
	// A socket file left by a killed process is stale: nobody listens on it.
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", sock, err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("chmod egress socket: %w", err)
	}
	var l net.Listener = ln
	if cfg.Wrap != nil {
		l = cfg.Wrap(l)
	}
	l = px.Listener(l)
	f := &Front{px: px, srv: px.NewServer(), served: make(chan struct{})}
	go func() {
		defer close(f.served)
		if err := f.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("egress: serve", slog.Any("err", err))
		}
	}()
	return f, nil
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

// Stop stops the front: new connections first (requests in flight get until ctx
// ends), then tunnels. It is safe to call more than once.
func (f *Front) Stop(ctx context.Context) {
	if err := f.srv.Shutdown(ctx); err != nil {
		_ = f.srv.Close()
	}
	f.px.Close() // hijacked connections (tunnels) are not the server's to close
	<-f.served
}

// Proxy is the run's proxy (its CA, its audit).
func (f *Front) Proxy() *Proxy { return f.px }

// Audit returns the run's egress records so far, also after Stop.
func (f *Front) Audit() []port.EgressRecord { return f.px.Audit() }

// Summary says how many records the run's egress audit wrote and which were
// summarised away, also after Stop.
func (f *Front) Summary() port.EgressSummary { return f.px.Summary() }
