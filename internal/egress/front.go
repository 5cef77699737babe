package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/agentsandbox/sandbox/port"
)

// systemBundles are where Linux distributions keep their CA bundle; the first found
// is appended to the agent's bundle, so tunnel-only providers verify as usual.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem", "/etc/pki/tls/cacert.pem", "/etc/ssl/cert.pem",
}

const maxBundleBytes = 4 << 20

// SystemRoots returns the host's CA bundle (the first of the usual places that can
// be read), preceded by a newline; nil when none can.
func SystemRoots() []byte {
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

// Front serves one run's Proxy on the egress socket of a socket directory (the one
// mounted into the sandbox as port.LLMSocketDir), with the agent's CA bundle next to
// it. Every front that owns a run's socket directory builds it the same way.
type Front struct {
	px     *Proxy
	srv    *http.Server
	served chan struct{}
}

// ServeDir makes the run's proxy from cfg, writes dir/port.EgressCAName (the run's CA
// certificate, then extraPEM, then the host's system roots), listens on
// dir/port.EgressSocketName (mode 0666: the sandbox's user connects; the directory
// is the run's alone) and serves the proxy there. wrap, if set, wraps the listener
// (peer checks, connection limits). On error nothing is left listening.
func ServeDir(cfg Config, dir string, extraPEM []byte, wrap func(net.Listener) net.Listener) (*Front, error) {
	px, err := New(cfg)
	if err != nil {
		return nil, err
	}
	bundle := px.CAPEM()
	bundle = append(bundle, extraPEM...)
	bundle = append(bundle, SystemRoots()...)
	if err := os.WriteFile(filepath.Join(dir, port.EgressCAName), bundle, 0o644); err != nil {
		return nil, fmt.Errorf("write egress CA bundle: %w", err)
	}
	sock := filepath.Join(dir, port.EgressSocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("stale egress socket: %w", err)
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
	if wrap != nil {
		l = wrap(l)
	}
	f := &Front{px: px, srv: px.NewServer(), served: make(chan struct{})}
	go func() {
		defer close(f.served)
		if err := f.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			px.log.Error("egress: serve", slog.Any("err", err))
		}
	}()
	return f, nil
}

// Proxy is the run's proxy (its audit, its CA).
func (f *Front) Proxy() *Proxy { return f.px }

// Audit returns the run's egress records so far (also after Shutdown).
func (f *Front) Audit() []port.EgressRecord { return f.px.Audit() }

// Shutdown stops the front: new connections first, then tunnels.
func (f *Front) Shutdown(ctx context.Context) {
	if err := f.srv.Shutdown(ctx); err != nil {
		_ = f.srv.Close()
	}
	f.px.Close() // hijacked connections (tunnels) are not the server's to close
	<-f.served
}
