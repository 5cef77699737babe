package sandboxgw

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/port"
)

// serveEgress serves the egress proxy and its CA bundle next to the router's socket
// (see egress.Host.StartFront), when the options ask for egress.
func (g *Gateway) serveEgress() error {
	if g.opts.Egress == nil {
		return nil
	}
	pol, err := egress.Compile(g.opts.Egress)
	if err != nil {
		return err
	}
	h := egress.Host{UnsafeAllow: g.opts.EgressUnsafeAllow, RootsPEM: g.opts.EgressUpstreamRoots}
	if g.opts.EgressResolver != nil {
		h.Resolver = g.opts.EgressResolver
	}
	if len(g.opts.EgressUpstreamRoots) > 0 {
		h.Roots = x509.NewCertPool()
		if !h.Roots.AppendCertsFromPEM(g.opts.EgressUpstreamRoots) {
			return port.Invalidf("sandboxgw: EgressUpstreamRoots holds no PEM certificate")
		}
	}
	f, err := h.StartFront(egress.FrontConfig{RunID: g.opts.RunID, Policy: pol, Dir: filepath.Join(g.opts.Dir, sockDir), Logger: g.log})
	if err != nil {
		return fmt.Errorf("sandboxgw: egress: %w", err)
	}
	g.egress = f
	return nil
}

// EgressAudit implements port.EgressAuditor: the records of every egress request the
// gateway's sandbox made through this host (also after Close); nil without egress.
func (g *Gateway) EgressAudit() []port.EgressRecord {
	if g.egress == nil {
		return nil
	}
	return g.egress.Audit()
}

// EgressSummary implements port.EgressSummarizer: how many egress records were
// written and which were summarised away; zero without egress.
func (g *Gateway) EgressSummary() port.EgressSummary {
	if g.egress == nil {
		return port.EgressSummary{}
	}
	return g.egress.Summary()
}

var (
	_ port.EgressAuditor    = (*Gateway)(nil)
	_ port.EgressSummarizer = (*Gateway)(nil)
)

// serveRouter listens on <Dir>/sock/llm.sock (mounted into the sandbox as its LLM
// socket) and serves the router there, plus the bridge's attestation.
func (g *Gateway) serveRouter() error {
	sd := filepath.Join(g.opts.Dir, sockDir)
	if err := os.MkdirAll(sd, 0o755); err != nil {
		return fmt.Errorf("sandboxgw: %w", err)
	}
	sock := filepath.Join(sd, port.LLMSocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandboxgw: stale socket: %w", err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("sandboxgw: %w", err)
	}
	// The sandbox's user connects; only this sandbox mounts the directory.
	if err := os.Chmod(sock, 0o666); err != nil {
		_ = ln.Close()
		return fmt.Errorf("sandboxgw: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+attestationPath, g.serveAttestation)
	mux.Handle("/", g.opts.Router)
	g.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	go func() { g.srvErr <- g.srv.Serve(ln) }()
	return nil
}

// serveAttestation takes the report of the latest sandbox's bridge: the first that
// carries its attestation key (204); 403 without the key (the gateway's own
// processes, any process of an earlier sandbox), 409 once it has reported.
func (g *Gateway) serveAttestation(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		http.Error(w, "attestation: unreadable body", http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case !bridgeapi.AttestKeyMatches(g.attestKey, r.Header.Get(bridgeapi.AttestKeyHeader)):
		g.log.Warn("sandboxgw: an attestation without the sandbox's attestation key was refused")
		http.Error(w, "attestation: not sent by the sandbox's bridge", http.StatusForbidden)
	case g.attested:
		http.Error(w, "attestation: the sandbox already has one", http.StatusConflict)
	default:
		g.attestation, g.attested = b, true
		w.WriteHeader(http.StatusNoContent)
	}
}

// attestationPath is where the bridge reports its sandbox's isolation.
const attestationPath = bridgeapi.AttestationPath

func (g *Gateway) shutdownServer() {
	if g.stop != nil {
		g.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = g.srv.Shutdown(ctx)
	if g.egress != nil {
		g.egress.Stop(ctx)
	}
	g.wg.Wait()
}
